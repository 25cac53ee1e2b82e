"""``Manager``: opens sessions by id, runs their workers, and closes idle ones."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Any

import anyio
import anyio.abc

from loop import Caller, EventBus, LoopError, Provider, State, Turn, UsageError, has, tracing
from loop.checks import non_negative_number, positive_int, positive_number
from session._groups import unwrap
from session._leases import Leasing, hand_off
from session._message import Message
from session._resume import history_of, resume
from session._session import Session, TurnProcessor
from session._steps import StepFactory, check_processor, checkpoints_var, step_factory
from session.stores._checkpoints import StoreCheckpoints
from session.stores._memory import MemoryStore
from session.stores._protocol import (CheckpointStore, HandOffStore, InboxStore, LeaseLost, LeaseStore, Store,
                                     check_session_id)
from cognitive import Checkpoints

Watcher = Callable[[Session], AbstractAsyncContextManager[object]]
_log = tracing.logger("session.manager")


class SessionLimit(LoopError):
    """Raised when opening one more session would pass the manager's ``max_sessions``."""


class ShuttingDown(SessionLimit):
    """Raised when a session is opened while the manager stops (see ``Manager.stop``)."""


class SessionElsewhere(SessionLimit):
    """Raised when a session is opened while another worker sharing the store holds its lease, and it did not let
    go within the manager's ``lease_wait`` (see ``Manager``): the conversation is busy elsewhere."""


class Manager:
    """Holds the store, the provider, the step factory and the processor, and owns every open session.

    The store is the caller's: the manager never closes it (close a ``SQLiteStore`` with ``async with`` or
    ``aclose`` after the manager's block).

    Use it as an async context manager: sessions' workers run in its task group and stop when it exits. A
    session not yet open is resumed from the store when it holds that id. Sessions idle for
    ``idle_timeout`` seconds are closed (their conversations stay in the store), and sessions with no
    conversation yet (opened, never sent a message) after ``empty_timeout`` seconds (at most ``idle_timeout``):
    an empty session holds a place but has nothing to lose. At most ``max_sessions`` are open at once.

    ``stop`` begins a shutdown: no session opens any more, and the open ones are closed, their messages
    interrupted, so that a server can answer the requests waiting on them before it exits.

    With a store that keeps an inbox (``InboxStore``), messages a session ``post``s survive the process:
    entering the manager resumes every conversation with messages waiting, and opening a session puts its
    conversation right first (a message cut short runs again from its start; tool calls left open are answered
    "interrupted": see ``session._resume``).

    With a store that keeps checkpoints (``CheckpointStore``), ``checkpoints`` is the store's, for a search to
    save its progress beside the conversations, and each session's runs find it with ``current_checkpoints()``.

    ``deps`` are the application's dependencies every session's runs see (``loop.RunContext.deps``; a message may
    bring its own), and ``approval_timeout`` how long tool calls wait for approval before they are denied.

    With a store that several processes share and that leases conversations (``LeaseStore``, as ``PostgresStore``
    does), the manager runs a conversation only while it holds its lease (see ``session._leases``): opening a
    session takes the lease, waiting up to ``lease_wait`` seconds for another worker to let go of it
    (``SessionElsewhere`` after that); a session idle for ``lease_idle`` seconds is closed and its lease let go;
    leases are renewed every third of ``lease_ttl``, and one lost (taken over) closes its session. A worker that
    dies loses its leases within ``lease_ttl`` seconds, and the other workers take over the conversations with
    messages waiting. ``holder`` names this worker in the leases (by default its host, process and a random part).
    """

    def __init__(
        self,
        processor: TurnProcessor,
        *,
        provider: Provider,
        store: Store | None = None,
        make_step: StepFactory | None = None,
        max_sessions: int = 1000,
        idle_timeout: float = 900.0,
        empty_timeout: float = 60.0,
        queue_size: int = 64,
        deps: Any = None,
        approval_timeout: float = 3600.0,
        lease_ttl: float = 5.0,
        lease_idle: float = 1.0,
        lease_wait: float = 30.0,
        holder: str | None = None,
    ) -> None:
        check_processor(processor)
        if isinstance(provider, str):
            raise UsageError(f"provider takes a Provider, not a string; for a spec use "
                             f"provider.from_spec({provider!r})")
        if not has(provider, Provider):
            raise UsageError(f"Manager needs a provider, got {provider!r}")
        if isinstance(store, (str, os.PathLike)):
            raise UsageError(f"store takes a Store, not a URL or path; use session.open_store({str(store)!r}) "
                             "(or SQLiteStore(path))")
        if store is not None and not isinstance(store, Store):
            raise UsageError(f"store takes a Store (with load and append), got {store!r}")
        if make_step is not None and not callable(make_step):
            raise UsageError(f"make_step takes a function (provider, events) -> step, such as step_factory(tools), "
                             f"got {make_step!r}")
        positive_int("max_sessions", max_sessions)
        positive_number("idle_timeout", idle_timeout, unit="seconds")
        positive_number("empty_timeout", empty_timeout, unit="seconds")
        positive_int("queue_size", queue_size)
        positive_number("approval_timeout", approval_timeout, unit="seconds")
        self.processor = processor
        self.provider = provider
        self.store = store if store is not None else MemoryStore()
        self.make_step = make_step or step_factory()
        self.max_sessions = max_sessions
        self.idle_timeout = float(idle_timeout)
        self.empty_timeout = min(float(empty_timeout), self.idle_timeout)
        self.queue_size = queue_size
        self.deps = deps
        self.approval_timeout = float(approval_timeout)
        self.leasing = (Leasing(self.store, ttl=lease_ttl, idle=lease_idle, wait=lease_wait, holder=holder)
                        if isinstance(self.store, LeaseStore) else None)
        self._sessions: dict[str, Session] = {}
        self._group: anyio.abc.TaskGroup | None = None
        self._opening: dict[str, tuple[anyio.Lock, list[int]]] = {}  # per session id: its lock, how many use it
        self._workers: dict[Session, anyio.Event] = {}  # set when the session's worker has stopped
        self._watchers: list[Watcher] = []
        self.stopping = False

    async def __aenter__(self) -> Manager:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._reap_idle)
        if self.leasing is not None:
            self._group.start_soon(self.leasing.keep, self.sessions, self.close, self._adopt)
            if isinstance(self.store, HandOffStore):
                receiving = lambda sid: None if self.stopping else self._sessions.get(sid)  # noqa: E731 (not draining)
                self._group.start_soon(self.leasing.follow_hand_offs, self.store, receiving, self.sessions, self._adopt)
        try:
            await self._resume_waiting()
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def _resume_waiting(self) -> None:
        """Open the conversations whose inbox holds messages a stopped process did not finish: they run now (with
        leases, those no other worker holds)."""
        if not isinstance(self.store, InboxStore):
            return
        if self.leasing is not None:
            for session_id in await self.leasing.store.lapsed():
                await self._adopt(session_id)
            return
        for session_id in await self.store.inboxes():
            if len(self._sessions) >= self.max_sessions:
                _log.warning("not resuming every session with messages waiting: max_sessions reached",
                             left=session_id)
                return
            _log.info("resuming a session with messages waiting", session=session_id)
            try:
                await self.open(session_id)
            except Exception as exc:  # the others still resume; this one does when it is next opened
                _log.warning("could not resume a session", session=session_id, error=repr(exc))

    async def _adopt(self, session_id: str) -> None:
        """Take over a conversation whose messages wait with nobody holding its lease (a worker stopped), if it is
        still free and this manager has room for it."""
        if self.stopping or session_id in self._sessions or len(self._sessions) >= self.max_sessions:
            return
        try:
            await self.open(session_id, wait=False)
        except SessionLimit:
            pass  # another worker took it first, or this one filled up meanwhile
        except Exception as exc:  # the others are still taken over; this one at the next sweep
            _log.warning("could not take over a session", session=session_id, error=repr(exc))
        else:
            _log.info("took over a session with messages waiting", session=session_id)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        for session in list(self._sessions.values()):
            await session.close()
        assert self._group is not None  # set by __aenter__
        self._group.cancel_scope.cancel()
        try:
            return await self._group.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            error = unwrap(group)
            if error is group:
                raise
            if error is exc:
                return False  # the block's own error goes on as it was raised
            raise error from error.__cause__
        finally:
            self._group = None
            self._sessions.clear()

    @property
    def checkpoints(self) -> Checkpoints | None:
        """The store's checkpoints (``StoreCheckpoints``), for ``TreeOfThoughts(step,
        checkpoints=manager.checkpoints)``; ``None`` when the store keeps none (it is not a ``CheckpointStore``)."""
        return StoreCheckpoints(self.store) if isinstance(self.store, CheckpointStore) else None

    def get(self, session_id: str) -> Session | None:
        """The open session with this id, if any."""
        return self._sessions.get(session_id)

    @property
    def open_sessions(self) -> int:
        return len(self._sessions)

    def sessions(self) -> tuple[Session, ...]:
        """The open sessions."""
        return tuple(self._sessions.values())

    async def open(self, session_id: str | None = None, *, history: Sequence[Turn] = (), wait: bool = True
                   ) -> Session:
        """The session with ``session_id``: already open, resumed from the store, or new. Without an id, a
        new session with an unguessable id. A new session starts from ``history`` (stored first); an
        existing one keeps its own and ignores it. With leases, a new session is stored at once (empty when
        without ``history``), so that every worker sharing the store knows it, and ``wait`` says whether to wait for
        another worker to let go of the session (see the class)."""
        if self._group is None:
            raise UsageError("open sessions inside 'async with manager:'")
        if self.stopping:
            raise ShuttingDown("the server is shutting down: it opens no more sessions")
        if session_id is None:
            session_id = secrets.token_urlsafe(18)
        check_session_id(session_id)
        session = self._sessions.get(session_id)
        if session is not None:
            return session
        async with self._one_at_a_time(session_id):
            return await self._open(session_id, history, wait)

    async def hand_off(self, session_id: str, message: Message, *, caller: Caller | None = None
                       ) -> tuple[str, int] | None:
        """Post a user's ``message`` to run on the worker holding session ``session_id`` (a ``HandOffStore``): its id
        and how many messages wait before it; ``None`` (nothing posted) when it is open here or nobody holds it."""
        store = self.store if self.leasing is not None else None
        if not isinstance(store, HandOffStore) or check_session_id(session_id) in self._sessions:
            return None
        return await hand_off(store, session_id, message, caller, self.queue_size)

    @asynccontextmanager
    async def _one_at_a_time(self, session_id: str) -> AsyncIterator[None]:
        """Hold session ``session_id``'s lock: opening it (from taking its lease to registering the session) and
        letting its lease go (once its worker has stopped) never overlap, so a worker stopping late cannot give up
        the lease a newer session of the same id has just taken."""
        lock, users = self._opening.setdefault(session_id, (anyio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._opening[session_id]

    async def _open(self, session_id: str, history: Sequence[Turn], wait: bool) -> Session:
        session = self._sessions.get(session_id)
        if session is not None:
            return session
        if len(self._sessions) >= self.max_sessions:
            raise SessionLimit(f"{len(self._sessions)} sessions are open, the most this manager allows")
        leasing = self.leasing
        if leasing is not None and not await leasing.take(session_id, wait=wait, stopping=lambda: self.stopping):
            if self.stopping:
                raise ShuttingDown("the server is shutting down: it opens no more sessions")
            raise SessionElsewhere(f"session {session_id!r} is running on another worker, which did not let go of "
                                   f"it within {leasing.wait if wait else 0:g} s; try again later")
        try:
            resumed = await resume(self.store, session_id)
            state = resumed.state
            if state is None and (history or leasing is not None):  # shared: every worker knows it from now on
                await self.store.append(session_id, 0, tuple(history), {})
                state = State(tuple(history))
            if self._group is None or self.stopping:
                raise ShuttingDown("the server is shutting down: it opens no more sessions")
            if len(self._sessions) >= self.max_sessions:
                raise SessionLimit(f"{len(self._sessions)} sessions are open, the most this manager allows")
        except BaseException as exc:
            if leasing is not None:
                await leasing.release(session_id)
            if isinstance(exc, LeaseLost):  # taken over while it was being opened: the client may try again
                raise SessionElsewhere(f"session {session_id!r} was taken over by another worker while it opened; "
                                       "try again") from exc
            raise
        events = EventBus()
        session = Session(session_id, step=self.make_step(self.provider, events), processor=self.processor,
                          store=self.store, state=state, events=events, queue_size=self.queue_size,
                          waiting=resumed.waiting, deps=self.deps, approval_timeout=self.approval_timeout)
        self._sessions[session_id] = session
        self._workers[session] = anyio.Event()
        self._group.start_soon(self._serve, session)
        return session

    async def history(self, session_id: str) -> State | None:
        """Conversation ``session_id``: the open session's, else the stored one as it will be when resumed
        (tool calls a stopped process left open are shown answered "interrupted"); ``None`` if none is stored.
        With leases, the stored one as it is: another worker may be running it."""
        session = self._sessions.get(session_id)
        if session is not None and not session.closed:
            return session.state
        if self.leasing is not None:  # it may be running on another worker: as stored, which its turns reach live
            return await self.store.load(check_session_id(session_id))
        return await history_of(self.store, check_session_id(session_id))

    async def close(self, session_id: str, *, wait: bool = False) -> bool:
        """Close an open session (its conversation stays in the store); whether it was open. With ``wait``, return
        once its worker has stopped: the message it ran is over, and what it completed (its open tool calls
        answered "cancelled") is stored."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        stopped = self._workers.get(session)
        await session.close()
        if wait and stopped is not None:
            await stopped.wait()
        return True

    async def stop(self) -> None:
        """Begin shutting down: refuse to open sessions from now on (``ShuttingDown``), and close every open one,
        interrupting the message it runs (its open tool calls are answered "cancelled" and stored), so that
        whoever waits on a message learns at once that it will not finish (``SessionClosed``). It does not wait
        for the workers; leaving the ``async with`` block does."""
        self.stopping = True
        for session_id in list(self._sessions):
            await self.close(session_id)

    def watch(self, watcher: Watcher) -> Callable[[], None]:
        """Run each session's worker from now on inside ``watcher(session)``, an async context manager entered as
        the worker starts and left once it has stopped (every write of it done): a conduit publishing the events
        of every session this process runs, say. A watcher that raises on entry stops that session. Returns a
        function that stops the watching (for the sessions opened after)."""
        if not callable(watcher):
            raise UsageError(f"watch takes a function (session) -> async context manager, got {watcher!r}")
        self._watchers.append(watcher)
        return lambda: self._watchers.remove(watcher) if watcher in self._watchers else None

    async def drain(self, grace: float) -> None:
        """Shut down gently: take no new sessions or hand-offs (``ShuttingDown``: a load balancer tries another
        worker), close each session once its messages are done, at most ``grace`` seconds, then ``stop``. With
        leases, each lease goes as its worker stops: another worker takes the conversation over at once."""
        non_negative_number("grace", grace, unit="seconds")
        self.stopping = True
        with anyio.move_on_after(grace):
            while self._sessions:  # each closes once idle (with leases, its conversation is free from then on)
                for session in [s for s in self._sessions.values() if not s.busy]:
                    await self.close(session.id)
                await anyio.sleep(0.05)
        await self.stop()

    async def _serve(self, session: Session) -> None:
        checkpoints_var.set(self.checkpoints)  # this task's own context: what its runs see in current_checkpoints()
        try:
            async with AsyncExitStack() as watched:
                try:
                    for watcher in self._watchers:
                        await watched.enter_async_context(watcher(session))
                except Exception as exc:
                    _log.error("a watcher failed: the session stops", session=session.id, error=repr(exc))
                    await session.close()
                    return
                await session.serve()
        except LeaseLost as exc:  # its lease was taken over while it wrote: the new holder runs it now
            _log.warning("a session stopped: its lease was taken over", session=session.id, error=str(exc))
        finally:
            if self._sessions.get(session.id) is session:
                del self._sessions[session.id]
            if self.leasing is not None:
                with anyio.CancelScope(shield=True):  # the lease must go even when the manager is cancelled
                    async with self._one_at_a_time(session.id):
                        if session.id not in self._sessions:  # else a newer session of this id holds it now
                            await self.leasing.release(session.id)
            stopped = self._workers.pop(session, None)
            if stopped is not None:
                stopped.set()

    async def _reap_idle(self) -> None:
        while True:
            await anyio.sleep(min(60.0, self.empty_timeout / 4))
            now = time.monotonic()
            for session in list(self._sessions.values()):
                timeout = self.idle_timeout if len(session.state) else self.empty_timeout
                if not session.busy and now - session.last_active > timeout:
                    _log.info("closing idle session", session=session.id)
                    await self.close(session.id)
