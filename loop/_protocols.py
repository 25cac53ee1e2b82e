"""The seams: what a provider streams, what a request carries, and the one-turn protocols."""

from __future__ import annotations

import operator
from collections.abc import AsyncIterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol, Union, runtime_checkable

import attrs

from loop.checks import positive_int
from loop._parts import Part, Role, Usage
from loop.errors import UsageError

if TYPE_CHECKING:  # annotations only: the conversation's types build on these, not the other way round
    from loop._state import State
    from loop._turn import Turn

# -- deltas: what a provider streams ---------------------------------------------------------------------


# Every delta ends with ``choice``: which of several choices of one response it belongs to; 0 unless n > 1 was
# asked (``Options.n``) of a provider that can return several. Deltas are built once per streamed chunk, so they
# stay slotted attrs classes without validators.


@attrs.frozen
class TextDelta:
    """A fragment of the assistant's text. ``choice``: which of several choices of one response this belongs
    to; 0 unless n > 1 was asked."""

    text: str
    choice: int = 0


@attrs.frozen
class ReasoningDelta:
    """A fragment of reasoning; a provider sends the block's ``signature`` on its last fragment, if any.
    ``choice``: which of several choices of one response this belongs to; 0 unless n > 1 was asked."""

    text: str = ""
    signature: str | None = None
    choice: int = 0


@attrs.frozen
class ToolCallDelta:
    """A fragment of tool call number ``index``. ``id`` and ``name`` come once (usually first); the
    ``arguments_fragment`` pieces of one index concatenate to the call's JSON arguments. Calls may interleave.
    ``choice``: which of several choices of one response this belongs to; 0 unless n > 1 was asked (each
    choice numbers its calls from 0)."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments_fragment: str = ""
    choice: int = 0


@attrs.frozen
class UsageDelta:
    """Token usage reported by the provider; several deltas add up. ``model`` is the model that answered, as
    the response names it (prices are looked up by it), when the provider says. ``choice``: which of several
    choices of one response this belongs to; 0 unless n > 1 was asked. A provider returning several choices
    reports the usage of the whole response once (the prompt is charged once), on choice 0."""

    usage: Usage
    model: str | None = None
    choice: int = 0


@attrs.frozen
class Finish:
    """The reason the response ended: ``stop``, ``tool_calls``, ``length``, ``content_filter`` or the provider's
    own. ``choice``: which of several choices of one response this belongs to; 0 unless n > 1 was asked (each
    choice then ends with its own ``Finish``)."""

    reason: str
    choice: int = 0


Delta = Union[TextDelta, ReasoningDelta, ToolCallDelta, UsageDelta, Finish]


# -- options and requests ------------------------------------------------------------------------------


def _check_tool_name(_: Any, __: Any, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise UsageError(f"UseTool needs the name of a tool, got {value!r}")


@attrs.frozen
class UseTool:
    """A ``tool_choice`` that forces the model to call the tool named ``name``."""

    name: str = attrs.field(validator=_check_tool_name)


ToolChoice = Union[Literal["auto", "none", "required"], UseTool]
_CHOICES = ("auto", "none", "required")


def _check_choice(_: Any, __: Any, value: Any) -> None:
    if value is not None and value not in _CHOICES and not isinstance(value, UseTool):
        raise UsageError(f"tool_choice must be 'auto', 'none', 'required' or UseTool(name), got {value!r}")


def _check_temperature(_: Any, __: Any, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not (isinstance(value, (int, float)) and 0 <= value <= 2)):
        raise UsageError(f"temperature must be a number from 0 to 2, got {value!r}")


def _check_seed(_: Any, __: Any, value: Any) -> None:
    if value is not None and not (isinstance(value, int) and not isinstance(value, bool)):
        raise UsageError(f"seed must be an integer, got {value!r}")


def _check_top_p(_: Any, __: Any, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not (isinstance(value, (int, float)) and 0 < value <= 1)):
        raise UsageError(f"top_p must be a number above 0 and at most 1, got {value!r}")


_EFFORTS = ("minimal", "low", "medium", "high")


def _check_effort(_: Any, __: Any, value: Any) -> None:
    if value is not None and value not in _EFFORTS:
        raise UsageError(f"reasoning_effort must be one of {', '.join(map(repr, _EFFORTS))}, got {value!r}")


def _extra(value: Any) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise UsageError(f"extra must be a mapping of request body fields, got {type(value).__name__}")
    bad = [k for k in value if not isinstance(k, str) or not k]
    if bad:
        raise UsageError(f"extra must be keyed by body field names (non-empty strings), got {bad[0]!r}")
    return MappingProxyType(dict(value))


def _stop(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _check_run_tools(_: Any, __: Any, value: Any) -> None:
    if value is not None and not isinstance(value, bool):
        raise UsageError(f"run_tools must be True, False or None, got {value!r}")


@attrs.frozen
class Options:
    """Settings for one provider call. ``None`` means "not set": the provider's default applies.

    A step holds default options; options passed to one ``turn`` override them field by field (``merge``).
    ``output_schema`` asks for structured output matching a JSON schema.

    For sampling: ``n`` asks for that many choices in one response (only providers with ``supports_choices``
    honour it; elsewhere ``Step.sample`` makes concurrent calls), ``seed`` asks for repeatable sampling where
    the provider supports it, ``top_p`` is nucleus sampling (above 0, at most 1), and ``reasoning_effort`` is
    ``"minimal"``, ``"low"``, ``"medium"`` or ``"high"``, mapped by each provider onto its own setting.
    ``extra`` holds provider-specific request body fields, merged into the body last (so they win over what
    the provider wrote); it is kept as a read-only copy. In ``merge``, an override's ``extra`` replaces the
    defaults' whole (it is not merged key by key; an empty mapping clears it).

    ``run_tools=False`` is for the step, not the provider: the turn ends once the model has proposed its
    calls, leaving them pending (the answer's outcome ``pending``) for approval or planning.
    """

    # The fields are checked in ``__attrs_post_init__``, one call for all of them, in field order.
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    tool_choice: ToolChoice | None = None
    # Compared but not hashed (a dict cannot be): options asking for different schemas are different options.
    output_schema: Mapping[str, Any] | None = attrs.field(default=None, hash=False)
    stop: tuple[str, ...] | None = attrs.field(default=None, converter=_stop)
    n: int | None = None
    seed: int | None = None
    top_p: float | None = None
    reasoning_effort: str | None = None
    # Compared but not hashed, like output_schema.
    extra: Mapping[str, Any] | None = attrs.field(default=None, converter=_extra, hash=False)
    # Not sent to the provider: whether the step runs the calls the model makes (False leaves them pending).
    run_tools: bool | None = None

    def __attrs_post_init__(self) -> None:
        # Options are made for every stage and typed ask: one call, and an unset (None) field costs a test.
        if self.temperature is not None:
            _check_temperature(self, None, self.temperature)
        if self.max_tokens is not None:
            positive_int("max_tokens", self.max_tokens, optional=True)
        if self.tool_choice is not None:
            _check_choice(self, None, self.tool_choice)
        if self.n is not None:
            positive_int("n (how many choices to return)", self.n, optional=True)
        if self.seed is not None:
            _check_seed(self, None, self.seed)
        if self.top_p is not None:
            _check_top_p(self, None, self.top_p)
        if self.reasoning_effort is not None:
            _check_effort(self, None, self.reasoning_effort)
        if self.run_tools is not None:
            _check_run_tools(self, None, self.run_tools)

    def merge(self, override: Options | None) -> Options:
        """These options with every field that ``override`` sets taking its value. ``extra`` is one field
        too: an override's mapping replaces this one's whole."""
        if override is None:
            return self
        theirs = _values(override)
        if theirs.count(None) == _FIELD_COUNT:  # it sets nothing (no set option value equals None)
            return self
        if type(self) is not Options or type(override) is not Options:
            # Anything else is built by its constructor, which checks what it is given.
            return attrs.evolve(self, **{name: v for name, v in zip(_FIELD_NAMES, theirs) if v is not None})
        ours = _values(self)
        if ours.count(None) == _FIELD_COUNT:
            return override  # nothing of ours to keep: the merge is the override itself (options are immutable)
        # Every value was checked (and converted) when its own options were made: copied, not checked again.
        merged = object.__new__(Options)
        for put, mine, given in zip(_SETTERS, ours, theirs):
            put(merged, mine if given is None else given)
        return merged


_FIELD_NAMES = tuple(f.name for f in attrs.fields(Options))
_FIELD_COUNT = len(_FIELD_NAMES)
_values = operator.attrgetter(*_FIELD_NAMES)  # every field's value, in field order, in one call
_SETTERS = tuple(Options.__dict__[name].__set__ for name in _FIELD_NAMES)  # the slots, past the frozen guard


@attrs.frozen
class ToolSpec:
    """What the model is told about a tool: its name, what it does, and a JSON schema of its parameters."""

    name: str
    description: str
    parameters: Mapping[str, Any] = attrs.field(hash=False)


@attrs.frozen
class Request:
    """One provider call: the turns the model should see, the tools it may call, and the effective options.

    ``path`` is the run path of the pattern that made the request (e.g. ``SelfConsistency/sample 3/ReAct``),
    set by the step; it is not sent to the model, but offline providers may answer by it.
    """

    turns: tuple[Turn, ...]
    tools: tuple[ToolSpec, ...] = ()
    options: Options = Options()
    path: str = ""


@attrs.frozen
class ProviderInfo:
    """What a provider says of itself (``loop.Described``), read by the step and by provider wrappers.

    ``model``: the model it asks for when the options name none (prices are looked up by the model that
    answered, and by this one before the first answer). ``choices``: whether it returns ``Options.n`` choices
    for one request (else ``Step.sample`` makes concurrent calls). ``json_schema``: whether it honours
    ``Options.output_schema`` natively in a response that may still call tools (as OpenAI's ``response_format``
    does; a forced output tool does not), so that a typed answer can be asked of a pattern's own last turn
    (``cognitive.WithOutput``). ``streams_usage``: whether its streamed responses report token usage (a
    provider that sends none has it estimated, marked ``Usage.estimated``). A provider that says nothing is
    taken to honour none of these."""

    model: str | None = None
    choices: bool = False
    json_schema: bool = False
    streams_usage: bool = True


# -- protocols -----------------------------------------------------------------------------------------


@runtime_checkable
class DeltaStream(Protocol):
    """What ``Provider.stream`` returns: an async iterator of deltas that can be closed (an async generator is
    one). ``aclose`` releases everything the stream holds, whether it ended, was left early or never started;
    closing it twice is harmless. Whoever consumes a stream closes it."""

    def __aiter__(self) -> AsyncIterator[Delta]: ...

    async def __anext__(self) -> Delta: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Provider(Protocol):
    """Streams one model response to a ``Request``.

    ``stream`` returns a ``DeltaStream`` of ``Delta`` values that ends after the response is complete (a
    ``Finish`` delta is usual but not required); write it as an async generator. A provider never builds
    turns; the step does. It raises ``ProviderError`` (or a subclass) when it cannot answer. Closing the stream
    early (``aclose``) or cancelling the task consuming it must release every resource it holds.
    """

    def stream(self, request: Request) -> DeltaStream: ...


@runtime_checkable
class TurnRunner(Protocol):
    """Runs exactly one inference turn.

    Returns ``state`` with the assistant's turn appended and, if it called tools, one ``TOOL`` turn holding a
    result for every call. ``options`` override the runner's defaults for this turn only. If cancelled, no
    state is returned and the caller's ``state`` is untouched (states are immutable).
    """

    async def turn(self, state: State, options: Options | None = None) -> State: ...


@runtime_checkable
class TurnSubmitter(Protocol):
    """Appends a turn that did not come from the model (a user message, a verification report), spoken by
    ``name`` when given (among several speakers), and publishes it as if it had been spoken; on the main line
    it is recorded like a turn the model wrote. Returns the new state."""

    async def submit(
        self, state: State, role: Role, *parts: Part, meta: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> State: ...


@runtime_checkable
class TurnExecutor(TurnRunner, TurnSubmitter, Protocol):
    """Both halves: what patterns are given to drive a conversation."""
