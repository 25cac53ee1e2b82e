"""How a session's worker runs: messages in order, each in its caller's context, its turn appended (or the
approvals it carries answered), the processor run on it, and how it ended published; a message runs again while
the store fails under it, and calls left waiting for approval are denied when their time is up."""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import nullcontext
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import anyio

from cognitive import GuardrailTripped
from loop import (Caller, Role, State, UsageError, Wake, answer_approvals, approving, awaiting_approval, carry,
                  main_line, run_context, tracing)
from session._events import Interrupted, MessageFailed, MessageFinished, MessageStarted
from session._groups import unwrap
from session._mainline import describe, extends, pause, record_failure, store_failed
from session._message import NO_DEPS, Queued, before, role_of, run_message
from session.stores._protocol import LeaseLost

if TYPE_CHECKING:
    from session._session import Session

_log = tracing.logger("session")


async def serve_until_interrupted(session: Session) -> None:
    """Process messages in order as they come, until the session is closed or interrupted. They share one
    cancel scope (``interrupt`` cancels it); a cancelled scope serves no further message, so after an
    interrupt the worker comes back here with a fresh one. They share one main line too: this task's turns
    are the conversation, stored as each completes (through its ``_record``); any other task's are branches."""
    queue = session._queue
    events = session.events
    with anyio.CancelScope() as scope, main_line(recorder=session._record), approving(session.approvals):
        session._scope = scope
        session.approvals.main = carry()
        while not scope.cancel_called:
            if session._dropped:
                await session._mark_done()
            if queue and not queue[0].writing:
                # The next message, run here rather than in a coroutine of its own: one less per message.
                item = queue.popleft()
                session._waiting -= 1
                session._current = item
                if events.has_subscribers:
                    events.publish(MessageStarted(item.id))
                tracer = tracing.current_tracer()
                base = session._stored
                if tracer is not None:
                    await run_traced(session, item, base, tracer)
                elif not await run_once(session, item):
                    await run_again(session, item, base)
                session._current = None
                session.last_active = time.monotonic()
            elif session.closed:
                break
            else:
                session._wake = wake = Wake()
                try:
                    if not session._awaiting:
                        await wake
                    else:  # calls wait for approval: until a message comes, or their time is up
                        await _wait_for_approval(session, wake)
                finally:
                    session._wake = None
    session._scope = None
    if scope.cancel_called:
        # Interrupted: the message being processed, if it had not finished, stopped with the turns it
        # completed stored. (An interrupt can land just as a message finishes: nothing was cut short then.)
        current, session._current = session._current, None
        session.last_active = time.monotonic()
        if current is not None:
            session._finish(current, None)
            if current.posted and not session.closed:
                session._dropped.append(current.id)  # the interrupt ended it: it must not run again
        dropped, session._dropped_by_interrupt = session._dropped_by_interrupt, 0
        session.events.publish(Interrupted(None if current is None else current.id, dropped))


async def _wait_for_approval(session: Session, wake: Wake) -> None:
    """Wait for ``wake``, or deny the calls waiting for approval once their time is up."""
    deadline = session.approvals.deadline(session._stored)
    if deadline is not None:
        with anyio.move_on_after(deadline - time.time()):
            await wake
            return
        denials = session.approvals.expired(session._stored)
        if denials:
            session._enqueue("approval").decisions = denials  # a decisions message: see ``Session.approve``
            return
    session._awaiting = False
    await wake



async def run_traced(session: Session, item: Queued, base: State, tracer: Any) -> None:
    """Run ``item`` (and again, see ``run_again``) inside a span."""
    with tracing.start(tracer, "session message", {"session.id": session.id, "session.message_id": item.id}):
        if not await run_once(session, item):
            await run_again(session, item, base)


async def run_again(session: Session, item: Queued, base: State) -> None:
    """The store failed under ``item``, an acknowledged message (conversation ``base`` before it): it waits,
    and the queue behind it, in order, and runs again from its start until the store works."""
    attempt = 1
    await pause(session, item, attempt, base)
    while not await run_once(session, item):
        attempt += 1
        await pause(session, item, attempt, base)


async def run_once(session: Session, item: Queued) -> bool:
    """Run ``item`` once; ``False`` when the store failed under a posted (acknowledged) message, which must
    then run again once the store works, rather than be reported failed."""
    events = session.events
    try:
        # A message with no caller nor deps runs with those of the context the session was opened in.
        given: dict[str, Any] = {} if item.caller is None and item.deps is NO_DEPS and session.deps is None else {
            "caller": item.caller, "deps": session.deps if item.deps is NO_DEPS else item.deps}
        with run_context(conversation=session.id, **given), \
                approving(item.approver, keep_open=False) if item.approver is not None else nullcontext():
            state = await _run(session, item)
        if state is not session._stored:  # usually it is: every turn was stored as it completed
            await session._persist(state, rewind=True)  # it becomes the conversation
    except Exception as raised:
        # A processor's own task group wraps the one error that failed it: report that error.
        exc = unwrap(raised) if isinstance(raised, ExceptionGroup) else raised
        if isinstance(exc, LeaseLost):  # another worker took the conversation over: it runs the message now
            _log.warning("lease lost: the message stops here", session=session.id, message=item.id, error=str(exc))
            session.events.publish(MessageFailed(item.id, str(exc), type(exc).__name__))
            session._finish(item, exc)
            await session.close()  # nothing more of it may be written; its waiting messages stay in the inbox
            return True
        if item.posted and store_failed(exc):
            if session.closed:  # closed meanwhile (its lease lapsed while the store failed): the message stays in
                session._finish(item, None)  # the inbox, to run wherever the conversation is opened next
                return True
            session.store_failing = f"{type(exc).__name__}: {exc}"
            return False
        _log.warning("message failed", session=session.id, message=item.id, error=repr(exc))
        session._awaiting = bool(awaiting_approval(session._stored))
        await record_failure(session, exc, item.id)
        if item.posted:
            await session._mark_done(item.id)
        tripped = exc.to_dict() if isinstance(exc, GuardrailTripped) else None
        session.events.publish(MessageFailed(item.id, str(exc), type(exc).__name__, tripped))
        session._finish(item, exc)
    else:
        session.store_failing = None
        if item.posted:
            await session._mark_done(item.id)
        outcome = state.outcome
        if outcome is not None and outcome.status == "pending":
            request = session.approvals.requested(state, item.id)
            session._awaiting = request is not None
            if request is not None:
                events.publish(request)
        else:
            session._awaiting = False
        if events.has_subscribers:
            status = "ok" if outcome is None else outcome.status
            events.publish(MessageFinished(item.id, state.answer, status == "degraded",
                                           "" if outcome is None else outcome.reason, status))
        session._finish(item, state)
    return True


async def _run(session: Session, item: Queued) -> State:
    """Run ``item``: its turn appended (or the decisions it carries answered) and the processor run on it."""
    session.approvals.message_id = item.id
    if item.decisions is not None:
        return await _decided(session, item)
    parts = item.parts
    meta = {"message_id": item.id} if item.caller is None else {"message_id": item.id,
                                                                 "caller": item.caller.to_dict()}
    asked = await session.step.submit(before(session._stored, parts), role_of(parts), *parts,
                                      meta=MappingProxyType(meta))
    if asked is not session._stored:  # an executor of the caller's own may not record: the message is kept
        await session._persist(asked)
    return _extending(await run_message(session.processor, session.step, asked, item), asked)


async def _decided(session: Session, item: Queued) -> State:
    """Answer the calls the conversation keeps open for approval as ``item`` decides, and resume the run (unless
    other calls, left for the caller, are still open). The run resumes as the caller who asked, not as the one
    who decided (``item.caller``, kept with the decisions)."""
    stored, decisions = session._stored, item.decisions
    assert decisions is not None  # a decisions message
    waiting = awaiting_approval(stored)
    if sorted(c.id for c in waiting) == sorted(d.call_id for d in decisions):  # else answer_approvals says why
        session.approvals.answered(waiting, decisions, None if item.caller is None else item.caller.id)
    with run_context(caller=asker(stored), conversation=session.id):
        answered = await answer_approvals(session.step, stored, decisions, by=item.caller)
        if answered.pending_calls:
            return answered
        return _extending(await run_message(session.processor, session.step, answered, item), answered)


def asker(state: State) -> Caller | None:
    """Who sent the conversation's latest message, as the session stored it with the message."""
    for turn in state.reversed():
        if turn.role is Role.USER:
            caller = turn.meta.get("caller")
            return Caller.from_dict(caller) if isinstance(caller, Mapping) else None
    return None


def _extending(state: Any, given: State) -> State:
    """``state``, when a processor given ``given`` returned it extending it; else ``UsageError``."""
    if state is given or (isinstance(state, State) and extends(state, given)):
        return state
    raise UsageError(f"the turn processor returned {describe(state)}, which does not extend the conversation it was "
                     "given; nothing of it was stored (a processor returns the state it was given with the new "
                     "turns appended)")
