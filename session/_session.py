"""``Session``: one conversation, served by one worker, persisted turn by turn."""

from __future__ import annotations

import itertools
import secrets
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc

from cognitive import TurnProcessor as TurnProcessor  # re-exported: session's lazy exports name it here
from loop import (Approver, Caller, Decision, EventBus, Options, OutputType, Role, State, ToolSpec, Turn, TurnExecutor,
                  UsageError, Wake, awaiting_approval, tracing)
from loop.checks import non_negative_int, positive_number
from session._approvals import Approvals
from session._events import ApprovalRequested, Interrupted, MessageQueued
from session._mainline import WriteLock, persist, write_now
from session._message import Message as Message  # re-exported: session's lazy exports name it here
from session._message import (NO_DEPS, Queued, SessionBusy as SessionBusy, SessionClosed as SessionClosed,
                              ToolResultsMismatch as ToolResultsMismatch, checked_caller, checked_decisions,
                              checked_message, message_options, message_parts, role_of)
from session._resume import answer_open_calls, mark_done
from session._handed import posted_item, refill
from session._running import serve_until_interrupted
from session.stores._memory import MemoryStore
from session.stores._protocol import HandOffStore, InboxStore, Store, StoreError

_log = tracing.logger("session")


class Session:
    """One conversation: a FIFO of messages served one at a time by a worker.

    Each message is appended as a user turn (or a tool turn, see ``send``) and handed to ``processor`` with
    the session's step, whose main-line turns are stored through ``store`` as each completes (the line's
    recorder, ``loop.main_line(recorder=...)``), so a pattern runs here exactly as in a script. ``events``
    carries the step's events and the session's own (``MessageQueued``, ``MessageStarted``, ``TurnStored``,
    ``TurnUpdated``, ``MessageFinished``/``MessageFailed``, ``Interrupted``). ``interrupt`` cancels the current message at once;
    pending tool calls get "cancelled" results so the stored history stays valid. A processor that raises leaves
    the session usable.

    ``send`` queues a message in memory; ``post`` stores it in the store's inbox (``InboxStore``) first, so
    that it survives the process being killed. ``waiting`` holds messages from that inbox to run first (a
    ``Manager`` passes those a stopped process left, see ``session._resume``). A posted message is marked
    done once its run has ended (answered or failed) and its turns are stored, or when an interrupt drops it;
    closing the session leaves the messages it had not finished waiting, for when it is next opened.

    Each message runs for its ``caller`` (who sent it, as the conduit says) with the application's ``deps``
    (the session's, or the message's own), both in the run's ``loop.RunContext``. Tool calls that need approval
    wait for ``approve`` (see ``session._approvals``), at most ``approval_timeout`` seconds.
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
        waiting: Sequence[Turn] = (),
        deps: Any = None,
        approval_timeout: float = 3600.0,
    ) -> None:
        self.id = session_id
        self.step = step
        self.processor = processor
        self.store = store
        self.events = events if events is not None else EventBus()
        self._stored = state if state is not None else State()
        self._queue_size = non_negative_int("queue_size", queue_size)
        # The FIFO the worker reads; ``_wake`` is set when the worker waits on an empty queue.
        self._queue: deque[Queued] = deque(posted_item(t) for t in waiting)
        self._wake: Wake | None = None
        self._waiting = len(self._queue)
        self._pending: dict[str, Queued] = {item.id: item for item in self._queue}
        self._known = set(self._pending)  # every inbox message this session has queued (see ``refill``)
        self._refilling: anyio.Lock | None = None
        self._handed = isinstance(store, HandOffStore)  # other workers put messages in its inbox
        self._inbox = store if isinstance(store, InboxStore) else None
        self._dropped: list[str] = []  # posted messages an interrupt dropped, to mark done in the inbox
        # Message ids: a random prefix per session, then a counter (cheaper than fresh randomness per message).
        self._ids_prefix = secrets.token_hex(4) + "_"
        self._ids = itertools.count(1)
        self._dropped_by_interrupt = 0
        self._current: Queued | None = None
        self._scope: anyio.CancelScope | None = None  # the scope the worker processes messages in
        self._write_lock = WriteLock()
        # A MemoryStore (whose append is its own) writes before append returns: the session writes to it at once,
        # without a coroutine, a lock or a shield per write (see ``session._mainline.write_now``).
        self._memory = store if isinstance(store, MemoryStore) and type(store).append is MemoryStore.append else None
        self.last_active = time.monotonic()
        self.closed = False
        self.store_failing: str | None = None  # why the store failed under the message that waits for it
        self.deps = deps
        self.approvals = Approvals(self.events, positive_number("approval_timeout", approval_timeout,
                                                                unit="seconds"))
        self._awaiting = bool(awaiting_approval(self._stored))  # calls the conversation keeps open for approval

    @property
    def state(self) -> State:
        """The conversation as stored."""
        return self._stored

    @property
    def busy(self) -> bool:
        """Whether a message is being processed or waiting."""
        return self._current is not None or self._waiting > 0

    # -- the caller's side --------------------------------------------------------------------------------

    def send(self, message: Message, *, output: Any = None, tools: Sequence[ToolSpec] = (),
             options: Options | None = None, caller: Caller | None = None, deps: Any = NO_DEPS,
             approver: Approver | None = None) -> str:
        """Queue a message, kept in memory only (see ``post``); returns its id. ``SessionBusy`` when the queue is full.

        A message is a user's text, or ``ToolResult`` parts answering every call a run left for the caller
        (outcome ``pending``; other results fail the message, and a user message answers them as not answered).
        ``output`` asks its run for a typed answer (the processor runs inside ``WithOutput``), ``tools`` offers
        the model tools the caller answers (``loop.external_tools``), and ``options`` are laid over every turn
        of its run (``loop.turn_options``). ``caller`` says who sent it and ``deps`` gives its run dependencies of
        its own (see the class). ``approver`` decides, as they come, the calls of its run that need approval,
        instead of the conversation keeping them open (a conduit whose client cannot be asked later)."""
        if caller is not None:
            checked_caller(caller)
        if approver is not None and not callable(approver):
            raise UsageError(f"approver takes an async function (calls) -> decisions, got {approver!r}")
        if output is None and tools == () and options is None:  # the usual message: nothing to check
            item = self._enqueue(message)
        else:
            item = self._enqueue(message, *message_options(output, tools, options))
        item.caller = caller
        item.deps = deps
        item.approver = approver
        if self.events.has_subscribers:
            self.events.publish(MessageQueued(item.id, self._waiting - 1 + (self._current is not None)))
        return item.id

    async def post(self, message: Message, *, caller: Caller | None = None) -> str:
        """Queue a user message durably; returns its id once the store's inbox holds it. From then on the
        message runs even if the process is killed first: when the session is next opened, in order, once.
        A message cut short by a crash runs again from its start, so its tools may see their calls twice.

        Raises what ``send`` raises, ``StoreError`` when the message could not be stored (it is then not queued
        either), and ``SessionClosed`` when the session closed while it was stored (it then never runs). With a
        store that has no inbox (not an ``InboxStore``) it is ``send``. ``caller`` is stored with it."""
        inbox = self._inbox
        if inbox is None:
            return self.send(message, caller=caller)
        if role_of(message_parts(message)) is not Role.USER:
            raise UsageError("post takes a user's message; send tool results with send or ask")
        checked_caller(caller)
        item = self._enqueue(message)
        self._known.add(item.id)
        item.caller = caller
        item.writing = True
        meta: dict[str, Any] = {"message_id": item.id}
        if caller is not None:
            meta["caller"] = caller.to_dict()
        try:
            with anyio.CancelScope(shield=True):  # once started, the write is seen through: it may be stored
                await inbox.post(self.id, Turn(Role.USER, item.parts, meta))
        except Exception as exc:
            self._unqueue(item, exc)
            raise
        if self._handed:  # other workers may have put messages in the inbox before this one: they run first
            try:
                await self.refill(before=item)
            except (SessionClosed, StoreError):
                pass  # closed: handled below; unreadable: they run when next read, or when the session reopens
        item.writing = False
        item.posted = True
        queue = self._queue
        if item.finished:  # dropped while it was written, by an interrupt or by closing: it must never run
            await self._mark_done(item.id)
            if self.closed:
                raise SessionClosed(f"session {self.id!r} closed before the message was accepted")
        else:
            if self.events.has_subscribers:
                self.events.publish(MessageQueued(item.id, queue.index(item) + (self._current is not None)))
            if queue[0] is item:
                self._wake_worker()
        return item.id

    async def refill(self, *, before: Queued | None = None) -> int:
        """Queue, in the inbox's order, the messages other workers put in this conversation's inbox for it
        (``HandOffStore.hand_off``) that it has not queued yet; how many. Those the inbox holds before ``before``
        (a message this session posted) are queued ahead of it. ``SessionClosed`` once it is closed (the messages
        then wait in the inbox for whoever opens the conversation next)."""
        if self._inbox is None:
            return 0
        if self._refilling is None:
            self._refilling = anyio.Lock()
        async with self._refilling:  # one read at a time, or two would queue the same message twice
            return await refill(self, self._inbox, before)

    def _enqueue(self, message: Message, output: OutputType[Any] | None = None, tools: tuple[ToolSpec, ...] = (),
                 options: Options | None = None) -> Queued:
        if self.closed:
            raise SessionClosed(f"session {self.id!r} is closed")
        parts = checked_message(message)
        queue = self._queue
        # A message the idle worker is about to take does not count as waiting.
        if len(queue) - (self._wake is not None) >= self._queue_size:
            raise SessionBusy(f"session {self.id!r} already has {self._waiting} messages waiting")
        message_id = f"msg_{self._ids_prefix}{next(self._ids):x}"
        if output is None and not tools and options is None:
            item = Queued(message_id, parts)  # the usual message: keywords cost a call twice as much
        else:
            item = Queued(message_id, parts, output=output, tools=tools, options=options)
        queue.append(item)
        wake = self._wake
        if wake is not None and len(queue) == 1:
            wake.set()
        self._waiting += 1
        self.last_active = time.monotonic()
        self._pending[item.id] = item
        return item

    def _unqueue(self, item: Queued, error: Exception) -> None:
        """Take back a message whose post failed: it was never stored, so it must not run."""
        item.writing = False
        if item in self._queue:
            self._queue.remove(item)
            self._waiting -= 1
            if self._queue and not self._queue[0].writing:
                self._wake_worker()
        self._finish(item, error)

    async def ask(self, message: Message, *, output: Any = None, tools: Sequence[ToolSpec] = (),
                  options: Options | None = None, caller: Caller | None = None, deps: Any = NO_DEPS,
                  approver: Approver | None = None) -> State:
        """Send a message (see ``send``) and wait for the conversation it produced; its exception if processing
        failed."""
        return await self._wait(self.send(message, output=output, tools=tools, options=options, caller=caller,
                                          deps=deps, approver=approver))

    async def _wait(self, message_id: str) -> State:
        """The conversation message ``message_id`` produced, once it has run; its exception if it failed."""
        item = self._pending[message_id]
        if not item.finished:
            await item.done
        if isinstance(item.result, BaseException):
            raise item.result
        if item.result is None:
            raise SessionClosed(f"message {message_id} was dropped (the session was interrupted or closed)")
        return item.result

    def approve(self, decisions: Decision | Sequence[Decision], *, caller: Caller | None = None) -> str | None:
        """Answer calls waiting for approval (``pending_approvals``). Those a running program waits on are handed
        to it at once; those the conversation keeps open are queued as a message that runs the approved calls,
        answers the denied ones and resumes the run: its id is returned (``None`` when every decision was for a
        running program). Those kept open must be decided together; when they are not, that message fails with
        ``loop.ApprovalMismatch`` naming the difference. ``caller`` is who decided, kept with the decisions."""
        given = checked_decisions(decisions)
        checked_caller(caller)
        kept = self.approvals.answer_live(given, None if caller is None else caller.id)
        if not kept:
            return None
        item = self._enqueue("approval")  # its text is never used: a message with decisions runs them instead
        item.decisions = tuple(kept)
        item.caller = caller
        if self.events.has_subscribers:
            self.events.publish(MessageQueued(item.id, self._waiting - 1 + (self._current is not None)))
        return item.id

    async def decide(self, decisions: Decision | Sequence[Decision], *, caller: Caller | None = None) -> State:
        """``approve``, then wait for the run it resumes (as ``ask`` does); the conversation as it stands when
        every decision was for a running program."""
        message_id = self.approve(decisions, caller=caller)
        return self._stored if message_id is None else await self._wait(message_id)

    def pending_approvals(self) -> tuple[ApprovalRequested, ...]:
        """What waits for approval now: the calls the conversation keeps open, then those running programs wait
        on."""
        return self.approvals.pending(self._stored)

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
                if item.posted and not self.closed:
                    self._dropped.append(item.id)
        if self._current is not None and self._scope is not None:
            self._dropped_by_interrupt += dropped
            self._scope.cancel()
        else:
            if self._dropped:
                self._wake_worker()  # to mark them done
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
                await serve_until_interrupted(self)
            if self._dropped:  # an interrupt just before the close
                await self._mark_done()
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
        """Answer tool calls left open by a process that stopped mid-turn, so the history is valid again (a
        ``Manager`` has done so already, see ``session._resume``)."""
        repaired = answer_open_calls(self._stored)
        if repaired is not self._stored:
            _log.warning("answering tool calls left open by an interrupted run", session=self.id,
                         calls=len(self._stored.pending_calls))
            await self._persist(repaired)

    async def _mark_done(self, *message_ids: str) -> None:
        """Take posted messages out of the store's inbox for good (they ran, failed or were dropped), and
        those an interrupt dropped."""
        dropped, self._dropped = self._dropped, []
        if self._inbox is not None:
            await mark_done(self._inbox, self.id, (*dropped, *message_ids))

    async def _record(self, state: State) -> None:
        """The main line's recorder: store what ``state`` adds to the conversation, when it extends it (a
        pattern's helper conversation, run on the main line, is not this conversation)."""
        if state is not self._stored:
            memory = self._memory
            if memory is not None:
                write_now(self, memory, state)
            else:
                await persist(self, state)

    def _finish(self, item: Queued, result: State | BaseException | None) -> None:
        item.finish(result)
        self._pending.pop(item.id, None)

    async def _persist(self, state: State, *, rewind: bool = False) -> None:
        """Write what ``state`` adds to the stored conversation (see ``session._mainline.persist``)."""
        if state is not self._stored:  # the common case after a processor returns: everything is stored already
            memory = self._memory
            if memory is not None:
                write_now(self, memory, state, rewind=rewind)
            else:
                await persist(self, state, rewind=rewind)
