"""A message: what a session accepts as one (a user's text, or results for the tool calls left for the caller),
how it waits in the session's queue, and how it is run."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from typing import Any, Union

from cognitive import WithOutput
from loop import (Approver, Caller, Decision, File, Image, LoopError, Options, OutputType, Part, Role, State, Text,
                  ToolResult, ToolSpec, Turn, TurnExecutor, UsageError, Wake, external_tools, turn_options)

Message = Union[str, Part, Sequence[Part]]
Processor = Callable[[TurnExecutor, State], Awaitable[State]]
UNANSWERED = "error: not answered: the conversation went on without this call's result"
NO_DEPS: Any = object()  # a message that names no dependencies of its own runs with its session's
_TOOL, _USER = Role.TOOL, Role.USER  # read once per message: a global is read faster than an enum's member


class SessionBusy(LoopError):
    """Raised when a session's queue of waiting messages is full."""


class SessionClosed(LoopError):
    """Raised when a message is sent to a session that has been closed."""


class ToolResultsMismatch(UsageError):
    """Raised (as the message's failure) when tool results sent as a message do not answer exactly the calls the
    conversation has open for the caller: other calls, some missing, or calls already answered."""


class Queued:
    """A message in a session's queue. Its ``done`` wake-up is made only when someone waits for it (``ask``).

    A text message waits as its string (checked already), and becomes its ``Text`` part when it runs: a thousand
    sessions with messages queued hold two objects fewer per message for the garbage collector to scan."""

    __slots__ = ("id", "_parts", "output", "tools", "options", "result", "finished", "posted", "writing", "_done",
                 "caller", "deps", "decisions", "approver")

    def __init__(self, message_id: str, parts: tuple[Part, ...] | str, *, posted: bool = False,
                 output: OutputType[Any] | None = None, tools: tuple[ToolSpec, ...] = (),
                 options: Options | None = None) -> None:
        self.id = message_id
        self._parts = parts
        self.output = output  # the typed answer asked for, if any
        self.tools = tools  # tools the caller answers (``loop.external_tools``) for this message's run
        self.options = options  # laid over every turn of this message's run (``loop.turn_options``)
        self.result: State | BaseException | None = None
        self.finished = False
        self.posted = posted  # it waits in the store's inbox until it is marked done
        self.writing = False  # it is being posted: the worker does not take it before it is stored
        self._done: Wake | None = None
        self.caller: Caller | None = None  # who sent it, as the conduit it came through says
        self.deps: Any = NO_DEPS  # the application's dependencies for its run (``NO_DEPS``: the session's)
        self.decisions: tuple[Decision, ...] | None = None  # answers to calls waiting for approval, if it is that
        self.approver: Approver | None = None  # decides its run's calls that need approval, live (see ``send``)

    @property
    def parts(self) -> tuple[Part, ...]:
        """The message's parts (see ``message_parts``)."""
        parts = self._parts
        if isinstance(parts, str):
            parts = self._parts = (Text(parts),)
        return parts

    @property
    def done(self) -> Wake:
        """Set once the message is finished (answered, failed or dropped); one task may wait on it."""
        if self._done is None:
            self._done = Wake()
            if self.finished:
                self._done.set()
        return self._done

    def finish(self, result: State | BaseException | None) -> None:
        if not self.finished:
            self.finished = True
            self.result = result
            if self._done is not None:
                self._done.set()


def message_parts(message: Message) -> tuple[Part, ...]:
    """The parts of a message: a user's text (with the images and files it shows), or ``ToolResult`` parts;
    ``UsageError`` for what is neither."""
    checked = checked_message(message)
    return (Text(checked),) if isinstance(checked, str) else checked


_USER_PARTS = (Text, Image, File)  # what a user's message may hold


def checked_message(message: Message) -> tuple[Part, ...] | str:
    """``message_parts``, but a user's text as the string itself (``Queued`` makes its part when it runs)."""
    if isinstance(message, str):
        if not message.strip():
            raise UsageError("a message must not be empty")
        return message if type(message) is str else (Text(message),)
    if isinstance(message, (list, tuple)):
        parts = tuple(message)
    else:
        parts = (message,)
    if parts and (all(isinstance(p, _USER_PARTS) for p in parts) or all(isinstance(p, ToolResult) for p in parts)):
        return parts
    raise UsageError(f"a message is a string, Text, Image and File parts, or ToolResult parts answering the calls "
                     f"left for the caller, got {message!r}")


def message_options(output: Any, tools: Any, options: Any
                    ) -> tuple[OutputType[Any] | None, tuple[ToolSpec, ...], Options | None]:
    """A message's ``output`` type, external ``tools`` and turn ``options``, checked."""
    typed = None if output is None else OutputType.of(output)
    if isinstance(tools, ToolSpec) or not isinstance(tools, (list, tuple)):
        raise UsageError(f"tools takes a list of loop.ToolSpec (the tools the caller answers), got {tools!r}")
    with external_tools(tools):  # checked now, as the run will take them
        pass
    if options is not None and not isinstance(options, Options):
        raise UsageError(f"options must be loop.Options or None, got {options!r}")
    return typed, tuple(tools), options


def checked_caller(caller: Any) -> Caller | None:
    """``caller`` when it is a ``loop.Caller`` or ``None``, else ``UsageError``."""
    if caller is not None and not isinstance(caller, Caller):
        raise UsageError(f"caller takes a loop.Caller (who sent the message) or None, got {caller!r}")
    return caller


def checked_decisions(decisions: Any) -> tuple[Decision, ...]:
    """``decisions`` as a non-empty tuple of ``loop.Decision``, else ``UsageError``."""
    if isinstance(decisions, Decision):
        return (decisions,)
    if not isinstance(decisions, (list, tuple)) or not decisions or not all(isinstance(d, Decision)
                                                                            for d in decisions):
        raise UsageError(f"approve takes loop.Decision values answering the calls that wait for approval, got "
                         f"{decisions!r}")
    return tuple(decisions)


def posted_turn(message: Message, caller: Any, message_id: str) -> Turn:
    """The inbox's turn of a user's ``message`` posted by ``caller`` (a ``loop.Caller`` or ``None``) under
    ``message_id``; ``UsageError`` for anything but a user's message."""
    parts = message_parts(message)
    if role_of(parts) is not Role.USER:
        raise UsageError("only a user's message can be posted; send tool results to the open session")
    meta: dict[str, Any] = {"message_id": message_id}
    checked = checked_caller(caller)
    if checked is not None:
        meta["caller"] = checked.to_dict()
    return Turn(Role.USER, parts, meta)


def role_of(parts: tuple[Part, ...]) -> Role:
    """The role of the turn a message's parts make: ``TOOL`` for results, else ``USER``."""
    return _TOOL if isinstance(parts[0], ToolResult) else _USER


def before(stored: State, parts: tuple[Part, ...]) -> State:
    """The conversation a message is appended to: results must answer exactly the calls left open for the
    caller (``UsageError`` naming the difference); a user message after such calls answers them first, as not
    answered, so the history stays valid to send to a model."""
    pending = stored.pending_calls
    if not isinstance(parts[0], ToolResult):
        if not pending:
            return stored
        return stored.append(Role.TOOL, *(ToolResult(c.id, c.name, UNANSWERED, is_error=True) for c in pending))
    given = [p.call_id for p in parts if isinstance(p, ToolResult)]
    open_ids = [c.id for c in pending]
    if sorted(given) != sorted(open_ids) or len(set(given)) != len(given):
        shown = ", ".join(open_ids) or "none"
        raise ToolResultsMismatch(f"the tool results answer calls {', '.join(given)}, but the calls open in the "
                                  f"conversation are: {shown}; send one result for each open call")
    names = {c.id: c.name for c in pending}
    wrong = [p.call_id for p in parts if isinstance(p, ToolResult) and p.name != names[p.call_id]]
    if wrong:
        raise ToolResultsMismatch(f"the tool results for {', '.join(wrong)} name another tool than the call they "
                                  "answer")
    return stored


def run_message(processor: Processor, executor: TurnExecutor, state: State, item: Queued) -> Awaitable[State]:
    """Run ``processor`` on ``state`` (ending in ``item``'s turn) as ``item`` asks: offering its external
    tools, and wrapped in ``WithOutput`` when it asks for a typed answer."""
    if item.output is None and not item.tools and item.options is None:
        return processor(executor, state)
    return _run(processor, executor, state, item)


async def _run(processor: Processor, executor: TurnExecutor, state: State, item: Queued) -> State:
    with external_tools(item.tools) if item.tools else nullcontext(), \
            turn_options(item.options) if item.options is not None else nullcontext():
        if item.output is None:
            return await processor(executor, state)
        return await WithOutput(_Processed(processor, executor), executor, item.output).run(state)


class _Processed:
    """A turn processor seen as a pattern, for a wrapper around it."""

    __slots__ = ("processor", "executor")

    def __init__(self, processor: Processor, executor: TurnExecutor) -> None:
        self.processor = processor
        self.executor = executor

    async def run(self, state: State) -> State:
        return await self.processor(self.executor, state)
