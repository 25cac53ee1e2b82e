"""``Session``: one conversation, served by one worker, persisted turn by turn."""

from __future__ import annotations

import itertools
import secrets
import time
from collections import deque
from collections.abc import Sequence
from types import MappingProxyType
from typing import Union, cast

import anyio
import anyio.abc

from cognitive import TurnProcessor as TurnProcessor  # re-exported: session's lazy exports name it here
from loop import (
    EventBus,
    LoopError,
    Part,
    Role,
    State,
    Text,
    ToolResult,
    Turn,
    TurnExecutor,
    UsageError,
    current_scope,
    main_line,
    non_negative_int,
    tracing,
)
from loop import Wake
from session._events import (
    Interrupted,
    MessageFailed,
    MessageFinished,
    MessageQueued,
    MessageStarted,
    TurnStored,
)
from session._groups import unwrap
from session._mainline import Persisting, describe, extends, failed_conversation
from session.stores._memory import MemoryStore
from session.stores._protocol import Store

Message = Union[str, Part, Sequence[Part]]
_log = tracing.logger("session")
INTERRUPTED = "interrupted: the process stopped before this tool call finished"


class SessionBusy(LoopError):
    """Raised when a session's queue of waiting messages is full."""


class SessionClosed(LoopError):
    """Raised when a message is sent to a session that has been closed."""


class _Message:
    """A queued message. Its ``done`` wake-up is made only when someone waits for it (``ask``)."""

    __slots__ = ("id", "parts", "result", "finished", "_done")

    def __init__(self, message_id: str, parts: tuple[Part, ...]) -> None:
        self.id = message_id
        self.parts = parts
        self.result: State | BaseException | None = None
        self.finished = False
        self._done: Wake | None = None

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


def _parts(message: Message) -> tuple[Part, ...]:
    if isinstance(message, str):
        if not message.strip():
            raise UsageError("a message must not be empty")
        return (Text(message),)
    if isinstance(message, (list, tuple)):
        parts = tuple(message)
    else:
        parts = (message,)
    if not parts or not all(isinstance(p, Text) for p in parts):
        raise UsageError(f"a user message is a string or Text parts, got {message!r}")
    return parts


class Session:
    """One conversation: a FIFO of user messages served one at a time by a worker.

    Each message is appended as a user turn and handed to ``processor`` with an executor that persists
    every completed turn through ``store``. ``events`` carries the step's events and the session's own
    (``MessageQueued``, ``MessageStarted``, ``TurnStored``, ``MessageFinished``/``MessageFailed``,
    ``Interrupted``). ``interrupt`` cancels the current message at once; pending tool calls get "cancelled"
    results so the stored history stays valid. A processor that raises leaves the session usable.
    """

    def __init__(
        self,
        session_id: str,
        *,
        step: TurnExecutor,
        processor: TurnProcessor,
        store: Store,
        state: State | None = None,
        events: EventBus | None = None,
        queue_size: int = 64,
    ) -> None:
        self.id = session_id
        self.step = step
        self.processor = processor
        self.store = store
        self.events = events if events is not None else EventBus()
        self._stored = state if state is not None else State()
        self._executor = Persisting(self)
        self._queue_size = non_negative_int("queue_size", queue_size)
        # The FIFO the worker reads; ``_wake`` is set when the worker waits on an empty queue.
        self._queue: deque[_Message] = deque()
        self._wake: Wake | None = None
        self._waiting = 0
        self._pending: dict[str, _Message] = {}
        # Message ids: a random prefix per session, then a counter (cheaper than fresh randomness per message).
        self._ids_prefix = secrets.token_hex(4) + "_"
        self._ids = itertools.count(1)
        self._dropped_by_interrupt = 0
        self._current: _Message | None = None
        self._scope: anyio.CancelScope | None = None  # the scope the worker processes messages in
        # A FIFO lock over store writes, made of a flag while uncontended (the usual case). Measured: an
        # uncontended anyio.Lock costs 5.8 µs per acquire and release (it yields to the event loop) against
        # 0.02 µs for the flag, and a message writes two to four times.
        self._writing = False
        self._write_waiters: deque[Wake] | None = None
        # MemoryStore.append never suspends, so nothing can interrupt it: its writes need no shield.
        self._append_at_once = getattr(type(store), "append", None) is MemoryStore.append
        self.last_active = time.monotonic()
        self.closed = False

    @property
    def state(self) -> State:
        """The conversation as stored."""
        return self._stored

    @property
    def busy(self) -> bool:
        """Whether a message is being processed or waiting."""
        return self._current is not None or self._waiting > 0

    # -- the caller's side --------------------------------------------------------------------------------

    def send(self, message: Message) -> str:
        """Queue a user message; returns its id. Raises ``SessionBusy`` when the queue is full."""
        if self.closed:
            raise SessionClosed(f"session {self.id!r} is closed")
        parts = _parts(message)
        queue = self._queue
        # A message the idle worker is about to take does not count as waiting.
        if len(queue) - (self._wake is not None) >= self._queue_size:
            raise SessionBusy(f"session {self.id!r} already has {self._waiting} messages waiting")
        item = _Message(f"msg_{self._ids_prefix}{next(self._ids):x}", parts)
        queue.append(item)
        wake = self._wake
        if wake is not None and len(queue) == 1:
            wake.set()
        position = self._waiting + (self._current is not None)
        self._waiting += 1
        self.last_active = time.monotonic()
        if self.events.has_subscribers:
            self.events.publish(MessageQueued(item.id, position))
        self._pending[item.id] = item
        return item.id

    async def ask(self, message: Message) -> State:
        """Send a message and wait for the conversation it produced; its exception if processing failed."""
        message_id = self.send(message)
        item = self._pending[message_id]
        if not item.finished:
            await item.done
        if isinstance(item.result, BaseException):
            raise item.result
        if item.result is None:
            raise SessionClosed(f"message {message_id} was dropped (the session was interrupted or closed)")
        return item.result

    def interrupt(self, *, drop_queued: bool = True) -> int:
        """Cancel the message being processed, and (by default) discard waiting ones; how many were dropped.

        ``Interrupted`` is published once the cancelled message has stopped and its turns are stored (at
        once when nothing was running)."""
        dropped = 0
        if drop_queued:
            queue = self._queue
            while queue:
                item = queue.popleft()
                self._waiting -= 1
                dropped += 1
                self._finish(item, None)
        if self._current is not None and self._scope is not None:
            self._dropped_by_interrupt += dropped
            self._scope.cancel()
        else:
            self.events.publish(Interrupted(None, dropped))
        return dropped

    async def close(self) -> None:
        """Interrupt, drop waiting messages, and stop the worker."""
        if not self.closed:
            self.closed = True
            self.interrupt()
            self._wake_worker()

    # -- the worker ---------------------------------------------------------------------------------------

    async def serve(self) -> None:
        """Process messages until the session is closed. Run it in a task group."""
        try:
            await self._repair()
            while not self.closed:
                await self._serve_until_interrupted()
        finally:
            # Nothing serves this session any more: refuse new messages, and release anyone waiting.
            self.closed = True
            while self._queue:
                self._waiting -= 1
                self._finish(self._queue.popleft(), None)

    def _wake_worker(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _repair(self) -> None:
        """Answer tool calls left open by a process that stopped mid-turn, so the history is valid again."""
        pending = self._stored.pending_calls
        if pending:
            _log.warning("answering tool calls left open by an interrupted run", session=self.id, calls=len(pending))
            results = [ToolResult(c.id, c.name, f"error: {INTERRUPTED}", is_error=True) for c in pending]
            await self._persist(self._stored.append(Role.TOOL, *results))

    async def _serve_until_interrupted(self) -> None:
        """Process messages in order as they come, until the session is closed or interrupted. They share one
        cancel scope (``interrupt`` cancels it); a cancelled scope serves no further message, so after an
        interrupt the worker comes back here with a fresh one."""
        queue = self._queue
        with anyio.CancelScope() as scope:
            self._scope = scope
            while not scope.cancel_called:
                if queue:
                    item = queue.popleft()
                    self._waiting -= 1
                    await self._process(item)
                elif self.closed:
                    break
                else:
                    self._wake = wake = Wake()
                    try:
                        await wake
                    finally:
                        self._wake = None
        self._scope = None
        if scope.cancel_called:
            # Interrupted: the message being processed, if it had not finished, stopped with the turns it
            # completed stored. (An interrupt can land just as a message finishes: nothing was cut short then.)
            current, self._current = self._current, None
            self.last_active = time.monotonic()
            if current is not None:
                self._finish(current, None)
            dropped, self._dropped_by_interrupt = self._dropped_by_interrupt, 0
            self.events.publish(Interrupted(None if current is None else current.id, dropped))

    async def _process(self, item: _Message) -> None:
        events = self.events
        tracer = tracing.current_tracer()
        self._current = item
        if events.has_subscribers:
            events.publish(MessageStarted(item.id))
        with tracing.NOOP_SPAN if tracer is None else tracing.start(
                tracer, "session message", {"session.id": self.id, "session.message_id": item.id}):
            with main_line():  # this task's turns are the conversation; any other task's are branches
                try:
                    asked = await self._executor.submit(self._stored, Role.USER, *item.parts,
                                                        meta=MappingProxyType({"message_id": item.id}))
                    state = await self.processor(self._executor, asked)
                    if state is not self._stored:  # usually it is: every turn was stored as it completed
                        if not isinstance(state, State) or not extends(state, asked):
                            raise UsageError(
                                f"the turn processor returned {describe(state)}, which does not extend the "
                                "conversation it was given; nothing of it was stored (a processor returns the "
                                "state it was given with the new turns appended)")
                        await self._persist(state, rewind=True)  # it becomes the conversation
                except Exception as raised:
                    # A processor's own task group wraps the one error that failed it: report that error.
                    exc = unwrap(raised) if isinstance(raised, ExceptionGroup) else raised
                    _log.warning("message failed", session=self.id, message=item.id, error=repr(exc))
                    await self._record_failure(exc, item.id)
                    self.events.publish(MessageFailed(item.id, str(exc), type(exc).__name__))
                    self._finish(item, exc)
                else:
                    if events.has_subscribers:
                        outcome = state.outcome
                        status = "ok" if outcome is None else outcome.status
                        events.publish(MessageFinished(item.id, state.answer, status == "degraded",
                                                       "" if outcome is None else outcome.reason, status))
                    self._finish(item, state)
        self._current = None
        self.last_active = time.monotonic()

    def _stores(self, state: State) -> bool:
        """Whether turns run now on ``state`` are the conversation's: on the main line, extending it."""
        return current_scope().on_main_line and extends(state, self._stored)

    async def _record_failure(self, exc: Exception, message_id: str) -> None:
        """Store how a message failed (see ``failed_conversation``)."""
        failed = failed_conversation(self._stored, exc, message_id)
        if failed is not None:
            try:
                await self._persist(failed)
            except Exception as error:  # the store is what failed: the message's own failure is reported anyway
                _log.warning("could not store a failed message's outcome", session=self.id, error=repr(error))

    def _finish(self, item: _Message, result: State | BaseException | None) -> None:
        item.finish(result)
        self._pending.pop(item.id, None)

    async def _persist(self, state: State, *, rewind: bool = False) -> None:
        """Write what ``state`` adds to the stored conversation (an outcome written on the stored answer
        rewrites that turn). A state that does not extend it is not this conversation and is not written,
        unless ``rewind``: a processor's result replaces what its abandoned drafts left stored."""
        if state is self._stored:
            return  # the common case after a processor returns: everything is stored already
        if not rewind and not extends(state, self._stored):
            return
        if self._writing:
            await self._wait_to_write()  # another write of this session (a concurrent turn) is under way
        else:
            self._writing = True
        try:
            stored = self._stored
            common = state.common_prefix(stored)
            size = len(state)
            if common == size == len(stored) and state.meta == stored.meta:
                return
            if size - common == 1:
                new = [cast(Turn, state.last)]  # the usual case: one turn more (so state has a last turn)
            else:
                new = list(itertools.islice(state.reversed(), size - common))
                new.reverse()
            # A write that has started always finishes: an interrupt landing mid-write must not lose a turn
            # whose message the caller was told was accepted.
            if self._append_at_once:
                await self.store.append(self.id, common, new, state.meta)
            else:
                with anyio.CancelScope(shield=True):
                    await self.store.append(self.id, common, new, state.meta)
            self._stored = state
            events = self.events
            if events.has_subscribers:
                for offset, turn in enumerate(new):
                    events.publish(TurnStored(common + offset, turn))
        finally:
            self._end_write()

    async def _wait_to_write(self) -> None:
        """Wait until the writes under way or queued before this one are done; this one then holds the turn."""
        waiter = Wake()
        if self._write_waiters is None:
            self._write_waiters = deque()
        self._write_waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.is_set():
                self._end_write()  # the turn was handed over just as this write was cancelled: pass it on
            else:
                self._write_waiters.remove(waiter)
            raise

    def _end_write(self) -> None:
        waiters = self._write_waiters
        if waiters:
            waiters.popleft().set()  # hand over to the next write in line (FIFO); ``_writing`` stays set
        else:
            self._writing = False
