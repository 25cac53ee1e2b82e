"""The executor contract: exactly what a pattern may use of the executor it is handed.

Each ability is a protocol of one or two members, the way Go declares optional interfaces (``io.WriterTo``
beside ``io.Writer``); ``Executor`` is all of them. ``Step`` is one, so is every ``Step.derive(...)``, every
``TurnMiddleware`` whatever it wraps, and what a session hands a pattern factory (the session's own ``Step``).
A pattern asks for the least it needs (``ReAct`` takes any ``TurnRunner``; ``Managed`` needs an ``Executor``
to add its view with ``derive``) and checks it once, when it is built, with ``require``: never by looking an
ability up while it runs. ``loop.testing.check_executor`` checks an implementation against the contract.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, Union, runtime_checkable

from loop._parts import Part, Role
from loop._protocols import Options, Provider, ProviderInfo, TurnExecutor, TurnRunner, TurnSubmitter
from loop._state import State
from loop.errors import UsageError

if TYPE_CHECKING:
    from loop._events import EventBus
    from loop._pipeline import ToolPipeline

Transform = Callable[[State], Union[State, Awaitable[State]]]
"""A view of the conversation for the model: ``State -> State``, sync or async. It never rewrites history."""


@runtime_checkable
class Sampler(Protocol):
    """Several answers to one state, as branches (``sample 1`` ... on the run path), never the main line.

    Returns exactly ``n`` states, each ``state`` with one answer appended (and, when it called tools, their
    results), in order. Where the provider returns several choices for one request the prompt is paid once;
    elsewhere, or for the choices a provider did not return, it makes concurrent calls. Raises the first
    sample's error if any failed; cancellation propagates. ``samples_in_one_request`` says whether its
    provider returns several choices for one request, so that samples are paid for once."""

    @property
    def samples_in_one_request(self) -> bool: ...

    async def sample(self, state: State, n: int, options: Options | None = None) -> tuple[State, ...]: ...


@runtime_checkable
class Viewer(Protocol):
    """What the model is shown: the executor's default ``options`` and the ``transforms`` (views, never
    rewriting history) that ``view`` applies in order."""

    @property
    def options(self) -> Options: ...

    @property
    def transforms(self) -> tuple[Transform, ...]: ...

    async def view(self, state: State) -> State: ...


@runtime_checkable
class ToolRunner(Protocol):
    """The tool pipeline its turns run calls through: ``await executor.pipeline.run(calls)`` runs calls
    without a model turn, with the same argument checks, timeouts, events, spans and budget charges."""

    @property
    def pipeline(self) -> ToolPipeline: ...


@runtime_checkable
class Publisher(Protocol):
    """The event bus its turns publish on; a pattern publishes what it adds there too (a budget report)."""

    @property
    def events(self) -> EventBus: ...


@runtime_checkable
class Deriver(Protocol):
    """An executor like this one for one stage of a pattern: another ``provider`` (a cheap model for a router
    or a judge), ``options`` laid over these, a subset of the ``tools`` by name, or other ``transforms``. The
    derived executor is an ``Executor`` too, shares the event bus, and keeps whatever middleware wraps this
    one. Unknown tool names raise ``UsageError``."""

    def derive(
        self,
        *,
        provider: Provider | None = None,
        options: Options | None = None,
        tools: Iterable[str] | None = None,
        transforms: Sequence[Transform] | None = None,
    ) -> Executor: ...


@runtime_checkable
class Described(Protocol):
    """A provider that says what it is: the model it asks for and what it honours (see ``ProviderInfo``). A
    ``Step`` and turn middleware are ``Described`` too, by their provider."""

    @property
    def info(self) -> ProviderInfo: ...


@runtime_checkable
class Closable(Protocol):
    """Something that holds resources (a provider's HTTP client) until ``aclose`` releases them; a wrapper of one
    (``provider.Retry``) is ``Closable`` too, closing what it wraps. Closing twice is harmless."""

    async def aclose(self) -> None: ...


@runtime_checkable
class Executor(TurnRunner, TurnSubmitter, Sampler, Deriver, Viewer, ToolRunner, Publisher, Protocol):
    """Every ability a pattern may use: one ``turn``, ``submit`` (with a speaker ``name=``), ``sample``,
    ``derive``, the ``view`` with its ``options`` and ``transforms``, the tool ``pipeline`` and the ``events``.
    A pattern cannot tell whether it runs in a script, a session or a server: a session records main-line turns
    through the run scope (``loop.main_line(recorder=...)``), not by wrapping the executor."""


_UNKNOWN_PROVIDER = ProviderInfo()
_HAS: dict[tuple[type, type], bool] = {}  # which classes have an ability: found once per class
_NAMES: dict[object, str] = {TurnRunner: "a TurnRunner (turn)", TurnSubmitter: "a TurnSubmitter (submit)",
          TurnExecutor: "a TurnExecutor (turn and submit)", Sampler: "a Sampler (sample)",
          Deriver: "a Deriver (derive)", Viewer: "a Viewer (view, options and transforms)",
          ToolRunner: "a ToolRunner (a tool pipeline)", Publisher: "a Publisher (events)",
          Described: "a Described provider (info)",
          Executor: "a loop.Executor (turn, submit, sample, derive, view, pipeline and events), such as a loop.Step"}

T = TypeVar("T")


def has(value: object, ability: type) -> bool:
    """Whether ``value`` has ``ability`` (one of the protocols above, or ``TurnRunner`` and its kin). Found
    once per class, since abilities are what a class declares (methods, properties, attributes every instance
    sets); a class that forwards attribute look-ups (``__getattr__``) is asked each time."""
    cls = type(value)
    key = (cls, ability)
    found = _HAS.get(key)
    if found is None:
        found = isinstance(value, ability)
        if not any("__getattr__" in vars(base) for base in cls.__mro__):
            _HAS[key] = found
    return found


def require(value: T, ability: type, who: str, what: str | None = None) -> T:
    """``value``, when it has ``ability``; else ``UsageError`` saying ``who`` needs it (``what``: how to call
    it) and what ``value`` lacks."""
    if has(value, ability):
        return value
    members = sorted(m for m in _members(ability) if m not in dir(value))
    lacks = f" (it has no {', '.join(members)})" if members else ""
    raise UsageError(f"{who} needs {what or _NAMES.get(ability, ability.__name__)}, got {value!r}{lacks}")


async def add_turn(runner: object, state: State, role: Role, *parts: Part,
                   meta: Mapping[str, Any] | None = None) -> State:
    """``state`` with a turn that did not come from the model: submitted through ``runner`` when it is a
    ``TurnSubmitter`` (published, and recorded on the main line), else appended. The one place a pattern
    decides between the two."""
    if has(runner, TurnSubmitter):
        added: State = await runner.submit(state, role, *parts, meta=meta)  # type: ignore[attr-defined]
        return added
    return state.append(role, *parts, meta=meta)


def provider_info(provider: object) -> ProviderInfo:
    """What ``provider`` says of itself (``Described``; a ``Step`` and turn middleware say it of their provider),
    or what is assumed of one that says nothing: no model name, one choice per request, no schema beside tools,
    and usage in its streams."""
    if has(provider, Described):
        info: ProviderInfo = provider.info  # type: ignore[attr-defined]  # checked: Described
        return info
    return _UNKNOWN_PROVIDER


def _members(ability: type) -> set[str]:
    names: set[str] = set()
    for cls in ability.__mro__:
        if cls is object or cls is Protocol or not cls.__dict__.get("_is_protocol", False):
            continue
        names.update(n for n in vars(cls) if not n.startswith("_"))
    return names
