"""``Session``: one conversation, served by one worker, persisted turn by turn."""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Union

import anyio
import anyio.abc
import attrs

from loop import (
    EventBus,
    LoopError,
    Part,
    Role,
    State,
    Text,
    ToolResult,
    TurnExecutor,
    UsageError,
    on_progress,
    tracing,
)
from session._events import (
    Interrupted,
    MessageFailed,
    MessageFinished,
    MessageQueued,
    MessageStarted,
    TurnStored,
)
from session._store import Store

TurnProcessor = Callable[[TurnExecutor, State], Awaitable[State]]
Message = Union[str, Part, Sequence[Part]]
_log = tracing.logger("session")
INTERRUPTED = "interrupted: the process stopped before this tool call finished"


class SessionBusy(LoopError):
    """Raised when a session's queue of waiting messages is full."""


class SessionClosed(LoopError):
    """Raised when a message is sent to a session that has been closed."""


@attrs.define(eq=False)
class _Message:
    id: str
    parts: tuple[Part, ...]
    done: anyio.Event = attrs.Factory(anyio.Event)
    result: State | BaseException | None = None


def _parts(message: Message) -> tuple[Part, ...]:
    if isinstance(message, str):
        if not message.strip():
            raise UsageError("a message must not be empty")
        return (Text(message),)
    if isinstance(message, (list, tuple)):
        parts = tuple(message)
    else:
        parts = (message,)  # type: ignore[assignment]
    if not parts or not all(isinstance(p, Text) for p in parts):
        raise UsageError(f"a user message is a string or Text parts, got {message!r}")
    return parts


class _Persisting:
    """The executor a session's processor sees: the session's step, with every turn written to the store as
    soon as it completes, and the open tool calls of an interrupted turn answered and written too."""

    def __init__(self, session: Session) -> None:
        self._session = session

    async def turn(self, state: State, options: Any = None) -> State:
        # The step reports the assistant's turn before its tools run, and the "cancelled" results if it is
        # interrupted while they run; both are stored, so the stored history is what happened and valid.
        with on_progress(self._session._persist):
            out = await self._session.step.turn(state, options)
        await self._session._persist(out)
        return out

    async def submit(self, state: State, role: Role, *parts: Part, meta: Mapping[str, Any] | None = None) -> State:
        out = await self._session.step.submit(state, role, *parts, meta=meta)
        await self._session._persist(out)
        return out


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
        self._executor = _Persisting(self)
        self._send, self._receive = anyio.create_memory_object_stream[_Message](queue_size)
        self._waiting = 0
        self._pending: dict[str, _Message] = {}
        # Message ids: a random prefix per session, then a counter (cheaper than fresh randomness per message).
        self._ids_prefix = secrets.token_hex(4) + "_"
        self._ids = itertools.count(1)
        self._dropped_by_interrupt = 0
        self._current: tuple[_Message, anyio.CancelScope] | None = None
        self._write_lock = anyio.Lock(fast_acquire=True)
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
        item = _Message(f"msg_{self._ids_prefix}{next(self._ids):x}", _parts(message))
        try:
            self._send.send_nowait(item)
        except anyio.WouldBlock:
            raise SessionBusy(f"session {self.id!r} already has {self._waiting} messages waiting") from None
        position = self._waiting + (self._current is not None)
        self._waiting += 1
        self.last_active = time.monotonic()
        self.events.publish(MessageQueued(item.id, position))
        self._pending[item.id] = item
        return item.id

    async def ask(self, message: Message) -> State:
        """Send a message and wait for the conversation it produced; its exception if processing failed."""
        message_id = self.send(message)
        item = self._pending[message_id]
        await item.done.wait()
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
            while True:
                try:
                    item = self._receive.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                    break
                self._waiting -= 1
                dropped += 1
                self._finish(item, None)
        current = self._current
        if current is not None:
            self._dropped_by_interrupt += dropped
            current[1].cancel()
        else:
            self.events.publish(Interrupted(None, dropped))
        return dropped

    async def close(self) -> None:
        """Interrupt, drop waiting messages, and stop the worker."""
        if not self.closed:
            self.closed = True
            self.interrupt()
            self._send.close()

    # -- the worker ---------------------------------------------------------------------------------------

    async def serve(self) -> None:
        """Process messages until the session is closed. Run it in a task group."""
        await self._repair()
        async with self._receive:
            async for item in self._receive:
                self._waiting -= 1
                await self._process(item)

    async def _repair(self) -> None:
        """Answer tool calls left open by a process that stopped mid-turn, so the history is valid again."""
        pending = self._stored.pending_calls
        if pending:
            _log.warning("answering tool calls left open by an interrupted run", session=self.id, calls=len(pending))
            results = [ToolResult(c.id, c.name, f"error: {INTERRUPTED}", is_error=True) for c in pending]
            await self._persist(self._stored.append(Role.TOOL, *results))

    async def _process(self, item: _Message) -> None:
        with anyio.CancelScope() as scope:
            self._current = (item, scope)
            self.events.publish(MessageStarted(item.id))
            with tracing.span("session message", {"session.id": self.id, "session.message_id": item.id}):
                try:
                    state = await self._executor.submit(self._stored, Role.USER, *item.parts,
                                                        meta={"message_id": item.id})
                    state = await self.processor(self._executor, state)
                    await self._persist(state)
                except Exception as exc:
                    _log.warning("message failed", session=self.id, message=item.id, error=repr(exc))
                    self.events.publish(MessageFailed(item.id, str(exc), type(exc).__name__))
                    self._finish(item, exc)
                else:
                    self.events.publish(MessageFinished(item.id, state.answer, state.degraded,
                                                        str(state.meta.get("degraded_reason", ""))))
                    self._finish(item, state)
        self._current = None
        self.last_active = time.monotonic()
        if scope.cancelled_caught:
            self._finish(item, None)
            dropped, self._dropped_by_interrupt = self._dropped_by_interrupt, 0
            self.events.publish(Interrupted(item.id, dropped))

    def _finish(self, item: _Message, result: State | BaseException | None) -> None:
        if not item.done.is_set():
            item.result = result
            item.done.set()
        self._pending.pop(item.id, None)

    async def _persist(self, state: State) -> None:
        """Write what ``state`` adds to the stored conversation; a branch rewinds to where it forked."""
        if state is self._stored:
            return  # the common case after a processor returns: everything is stored already
        async with self._write_lock:
            stored = self._stored
            common = state.common_prefix(stored)
            if common == len(state) == len(stored) and state.meta == stored.meta:
                return
            new = list(itertools.islice(state.reversed(), len(state) - common))
            new.reverse()
            # A write that has started always finishes: an interrupt landing mid-write must not lose a turn
            # whose message the caller was told was accepted.
            with anyio.CancelScope(shield=True):
                await self.store.append(self.id, common, new, state.meta)
            self._stored = state
            for offset, turn in enumerate(new):
                self.events.publish(TurnStored(common + offset, turn))
