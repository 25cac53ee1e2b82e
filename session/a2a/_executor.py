"""``SessionExecutor``: the A2A SDK's ``AgentExecutor`` running each task's message as a message in a session.

Conversations. A task's ``contextId`` names its conversation: the session the manager knows by
``session_key(owner, contextId)`` for the request's token owner, so two tokens naming the same context never
share one (by default the key is the session routes', ``<owner>:<contextId>``, so the conversation can also be
read, followed and continued at ``/sessions/{contextId}``). Every message is a task of its own; a message naming
a task that waits for input (``input-required``) answers it (``session.a2a._approvals``). A message's text and the
files it shows (images and documents) are read as ``session.a2a._parts`` says.

A run. The task is announced (``submitted``), goes ``working``, reports the main line's tool activity as it
happens (``session.a2a._progress``), and ends as ``session.a2a._ending`` says, its answer as the ``answer``
artifact. Messages of one conversation run one after the other, in the order they came.

Cancellation. ``cancel`` (``tasks/cancel``) interrupts the message if it runs (its open tool calls are answered
"cancelled" in the stored conversation), or, still waiting for the conversation, makes sure it never runs; the
task ends ``canceled`` once the run has stopped. A client that disconnects does not cancel its task (A2A tasks
outlive their streams; ``tasks/resubscribe`` follows one again).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
import anyio
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Part, Task, TaskState, TaskStatus

from loop import Approver, Caller, LoopError, State, Subscription, UsageError, awaiting_approval, tracing
from loop.checks import positive_number
from session._bearer import ANONYMOUS, TokenQuota
from session._followed import Followed
from session._manager import Manager, SessionLimit, ShuttingDown
from session._session import Session
from session.a2a._approvals import decisions, prompt
from session.a2a._ending import SHUTTING_DOWN, Ending, finished, never_ran, raised, refused
from session.a2a._parts import message_content
from session.a2a._progress import progress
from session.openai._errors import OpenAIError

SessionKey = Callable[[str, str], str]
"""The id the manager knows a conversation by, from the token owner and the ``contextId``."""
SessionOpened = Callable[[str, Session], None]
"""Told of every conversation a task opens: its ``contextId`` and the session."""
OWNER = "owner"
"""The key of the token owner in a ``ServerCallContext``'s state (``session.a2a._endpoint`` puts it there)."""
_log = tracing.logger("session.a2a")


def session_key(owner: str, context_id: str) -> str:
    """The session routes' id for a token owner's conversation: ``<owner>:<contextId>``."""
    return f"{owner}:{context_id}"


def owner_of(call: ServerCallContext) -> str:
    """The token owner a request was let in as (``ANONYMOUS`` when nothing said)."""
    owner = call.state.get(OWNER)
    return owner if isinstance(owner, str) and owner else ANONYMOUS


class _Run:
    """One task's message: its run followed through the session's events, and how far it got."""

    def __init__(self, updater: TaskUpdater) -> None:
        self.updater = updater
        self.followed = Followed()
        self.session: Session | None = None
        self.events: Subscription | None = None
        self.waiting: anyio.CancelScope | None = None  # set while it waits for its conversation to be free
        self.cancel_requested = False
        self.interrupted = False
        self.ended = False  # its final status is published (or being published)
        self.finished = anyio.Event()  # the executor is done with it

    def request_cancel(self) -> None:
        """Stop the run: not started yet, it never starts; running, it is interrupted."""
        self.cancel_requested = True
        if self.waiting is not None:
            self.waiting.cancel()
        if self.events is not None:  # up to date on whether the message runs now (the reporter may lag)
            for stamped in self.events.drain():
                self.followed.observe(stamped.event)
        self.stop_if_running()

    def stop_if_running(self) -> None:
        """Interrupt the message if a cancel was asked for and it is the one the session runs now."""
        session = self.session
        if self.cancel_requested and self.followed.running and not self.interrupted and session is not None:
            self.interrupted = True
            session.interrupt(drop_queued=False)


class _Turns:
    """One lock per conversation, held while a task's message runs in it: the messages of a conversation run in
    the order they came, and one still waiting can be canceled before the session ever sees it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[anyio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (anyio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


class SessionExecutor(AgentExecutor):
    """Runs A2A tasks' messages in ``manager``'s sessions (see the module docstring).

    ``session_key`` names a conversation's session; ``on_open`` hears of every one a task opens; with a
    ``quota``, conversations are opened within the token's. ``approver`` decides calls that need approval as
    they come (``None``: the task asks its client). A canceled run gets ``cancel_grace`` seconds to stop before
    the task is reported canceled anyway. The manager must be running while tasks are."""

    def __init__(self, manager: Manager, *, session_key: SessionKey = session_key,
                 on_open: SessionOpened | None = None, quota: TokenQuota | None = None,
                 approver: Approver | None = None, cancel_grace: float = 10.0) -> None:
        if not isinstance(manager, Manager):
            raise UsageError(f"the A2A executor needs a session Manager, got {manager!r}")
        if not callable(session_key):
            raise UsageError(f"session_key must be a function (owner, context_id) -> str, got {session_key!r}")
        if on_open is not None and not callable(on_open):
            raise UsageError(f"on_open must be a function (context_id, session) or None, got {on_open!r}")
        if quota is not None and not isinstance(quota, TokenQuota):
            raise UsageError(f"quota must be a TokenQuota or None, got {quota!r}")
        self.manager = manager
        self.session_key = session_key
        self.on_open = on_open
        self.quota = quota
        self.approver = approver
        self.cancel_grace = float(positive_number("cancel_grace", cancel_grace, unit="seconds"))
        self._runs: dict[str, _Run] = {}
        self._turns = _Turns()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Run the task's message and publish how it goes, ending in a final (or input-required) status."""
        task_id, context_id = context.task_id or "", context.context_id or ""
        run = _Run(TaskUpdater(event_queue, task_id, context_id))
        self._runs[task_id] = run
        try:
            if context.current_task is None and context.message is not None:
                await event_queue.enqueue_event(Task(id=task_id, context_id=context_id, history=[context.message],
                                                     status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)))
            await self._end(run, await self._run(run, context))
        finally:
            if self._runs.get(task_id) is run:
                del self._runs[task_id]
            if not run.ended:  # cut short (the server closing): the message must not run on unfollowed
                run.request_cancel()
            run.finished.set()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Stop the task's run and end the task ``canceled`` (see the module docstring)."""
        task_id = context.task_id or ""
        run = self._runs.get(task_id)
        if run is None:  # nothing runs for it here: it waits for input
            updater = TaskUpdater(event_queue, task_id, context.context_id or "")
            await updater.cancel(updater.new_agent_message([Part(text="The task was canceled.")]))
            return
        run.request_cancel()
        with anyio.move_on_after(self.cancel_grace):
            await run.finished.wait()
        if not run.ended:
            _log.warning("a canceled A2A task's run did not stop in time", task=task_id)
            await self._end(run, raised(RuntimeError("canceled"), canceled=True))

    async def _run(self, run: _Run, context: RequestContext) -> Ending:
        """The message run in its conversation, and how that ended."""
        owner = owner_of(context.call_context)
        caller = Caller(owner, owner)
        current = context.current_task
        answering = current is not None and current.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        said = None if answering else message_content(context.message)
        if isinstance(said, Ending):
            return said
        opened = await self._open(owner, context.context_id or "")
        if isinstance(opened, Ending):
            return opened
        session = run.session = opened
        start: Callable[[], Awaitable[State]]
        if said is None:
            waiting = awaiting_approval(session.state)
            if not waiting:
                return refused("The tool calls this task waited on no longer wait for approval (they were answered "
                               "elsewhere, or their time ran out); send a new message instead.", code="approval_gone")
            start = functools.partial(session.decide, decisions(context.message, waiting), caller=caller)
        else:
            start = functools.partial(session.ask, said, caller=caller, approver=self.approver)
        await run.updater.start_work()
        with anyio.CancelScope() as run.waiting:
            async with self._turns.hold(session.id):
                run.waiting = None
                if not run.cancel_requested:  # canceled before it waited: it does not run either
                    return await self._follow(run, session, start)
        return never_ran()

    async def _open(self, owner: str, context_id: str) -> Session | Ending:
        """The conversation ``context_id`` of ``owner``, opened; or the ending of a task that cannot have it."""
        try:
            key = self.session_key(owner, context_id)
            if self.quota is None:
                session = await self.manager.open(key)
            else:
                session = await self.quota.open(owner, key)
            if self.on_open is not None:
                self.on_open(context_id, session)
        except ShuttingDown:
            return refused(SHUTTING_DOWN, code="server_shutting_down")
        except SessionLimit as exc:
            return refused(f"The server cannot open the conversation now: {exc}", code="session_limit")
        except OpenAIError as exc:  # what the session routes refuse a conversation with (one grown too large)
            return refused(exc.message, code=exc.code or "refused", state=TaskState.TASK_STATE_REJECTED)
        except UsageError as exc:
            return refused(f"contextId: {exc}", code="invalid_context", state=TaskState.TASK_STATE_REJECTED)
        except LoopError as exc:
            _log.warning("could not open an A2A conversation", context=context_id, error=repr(exc))
            return refused(f"The server could not open the conversation: {exc}", code="session_unavailable")
        return session

    async def _follow(self, run: _Run, session: Session, start: Callable[[], Awaitable[State]]) -> Ending:
        """Send the message (``start``) and report its run until it ends; how it ended."""
        result: State | Exception
        # Subscribing and sending with no checkpoint between makes this message's MessageQueued the first event
        # the subscription holds (see ``Followed``).
        with session.events.subscribe(buffer=None, stamped=True) as events:
            run.events = events
            async with anyio.create_task_group() as group:
                group.start_soon(self._report, run, events)
                try:
                    result = await start()
                except Exception as exc:
                    result = exc
                finally:
                    events.close()  # the reporter reports what is buffered, then ends
        if isinstance(result, State):
            return finished(result, prompt=prompt(awaiting_approval(result)))
        if not run.cancel_requested and not self.manager.stopping:
            _log.info("A2A task's run failed", session=session.id, error=repr(result))
        return raised(result, canceled=run.cancel_requested, stopping=self.manager.stopping)

    async def _report(self, run: _Run, events: Subscription) -> None:
        """Publish the run's progress as ``working`` status updates, and interrupt it once it starts if it was
        canceled while it waited."""
        updater = run.updater
        async for stamped in events:
            during = run.followed.observe(stamped.event)
            run.stop_if_running()
            shown = progress(stamped) if during else None
            if shown is not None and not run.ended:
                # The details ride on the message: a status's own metadata would be merged into the task's.
                message = updater.new_agent_message([Part(text=shown.text)], metadata=shown.metadata)
                try:
                    await updater.update_status(TaskState.TASK_STATE_WORKING, message=message)
                except RuntimeError:  # the task was reported canceled already: its run's last words go unsaid
                    return

    async def _end(self, run: _Run, ending: Ending) -> None:
        """Publish ``ending``: the answer artifact, then the final status (once per task)."""
        if run.ended:
            return
        run.ended = True
        updater = run.updater
        if ending.answer is not None:
            await updater.add_artifact([Part(text=ending.answer)], name="answer",
                                       metadata={"outcome": dict(ending.metadata.get("outcome") or {})})
        message = updater.new_agent_message([Part(text=ending.message)]) if ending.message else None
        await updater.update_status(ending.state, message=message, metadata=dict(ending.metadata))

