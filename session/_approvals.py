"""A session's approvals: tool calls that wait for a person, and how long they wait.

Two kinds wait (see ``loop.require_approval``). Calls the conversation keeps open stop its run: the message
finishes with the outcome ``pending``, the calls are stored with the conversation, and an answer (``Session.approve``,
through any conduit, after a restart too) runs the approved ones, denies the others and resumes the run. Calls a
running program waits on (a code-action program's bridged call, a call in a branch) cannot outlive the process:
the session is the run's approver (``loop.approving``) and answers them live. Both are denied when nobody answers
within ``timeout`` seconds: the kept ones count from when they were asked (stored with them), checked while the
session is open and when it is next opened; the live ones as they wait.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

import anyio

from loop import Carried, Decision, EventBus, State, ToolCall, approval_asked_at, awaiting_approval
from session._events import ApprovalAnswered, ApprovalRequested


def timed_out(timeout: float) -> str:
    """The reason a call nobody answered in time is denied with."""
    return f"no answer within {timeout:g} seconds"


def deadline_of(state: State, timeout: float) -> float | None:
    """When the calls ``state`` keeps open for approval are denied, ``timeout`` seconds after they were asked
    (seconds since the epoch); ``None`` when none wait."""
    if not awaiting_approval(state):
        return None
    at = approval_asked_at(state)
    return (time.time() if at is None else at) + timeout


def kept_request(state: State, timeout: float, message_id: str | None = None) -> ApprovalRequested | None:
    """The request for the calls ``state`` keeps open for approval, if any."""
    calls = awaiting_approval(state)
    if not calls:
        return None
    deadline = deadline_of(state, timeout)
    assert deadline is not None  # calls wait
    return ApprovalRequested(message_id, calls, deadline)


class _Asked:
    """Calls a running program waits on, and the decisions given so far."""

    __slots__ = ("calls", "deadline", "decisions", "done")

    def __init__(self, calls: tuple[ToolCall, ...], deadline: float) -> None:
        self.calls = calls
        self.deadline = deadline
        self.decisions: dict[str, Decision] = {}
        self.done = anyio.Event()


class Approvals:
    """The approvals of one session: its live asks, its ``timeout``, and the events it publishes on ``events``."""

    __slots__ = ("events", "timeout", "message_id", "main", "_live")

    def __init__(self, events: EventBus, timeout: float) -> None:
        self.events = events
        self.timeout = timeout
        self.message_id: str | None = None  # the message running now, named on live requests
        # The worker's main line, entered to publish: a request from a branch or a program's bridged call is the
        # conversation's own news, for every conduit following the main line.
        self.main: Carried | None = None
        self._live: dict[str, _Asked] = {}  # by call id

    def deadline(self, state: State) -> float | None:
        """When the calls ``state`` keeps open for approval are denied (seconds since the epoch); ``None`` when
        none wait."""
        return deadline_of(state, self.timeout)

    def requested(self, state: State, message_id: str | None) -> ApprovalRequested | None:
        """The request for the calls ``state`` keeps open, if any."""
        return kept_request(state, self.timeout, message_id)

    def pending(self, state: State) -> tuple[ApprovalRequested, ...]:
        """Every request waiting now: the kept one of ``state`` first, then the live ones, oldest first."""
        kept = self.requested(state, None)
        live = []
        seen: set[int] = set()
        for asked in self._live.values():
            if id(asked) not in seen:
                seen.add(id(asked))
                waiting = tuple(c for c in asked.calls if c.id not in asked.decisions)
                if waiting:  # every call answered: its program has yet to take the answers, but waits no more
                    live.append(ApprovalRequested(self.message_id, waiting, asked.deadline, True))
        return ((kept,) if kept is not None else ()) + tuple(live)

    def expired(self, state: State) -> tuple[Decision, ...]:
        """Denials for the calls ``state`` keeps open, when their time is up (empty otherwise)."""
        deadline = self.deadline(state)
        if deadline is None or time.time() < deadline:
            return ()
        return tuple(Decision.deny(c.id, timed_out(self.timeout)) for c in awaiting_approval(state))

    def publish(self, event: ApprovalRequested | ApprovalAnswered) -> None:
        """Publish ``event`` as the conversation's main line does."""
        main = self.main
        if main is None:
            self.events.publish(event)
        else:
            with main:
                self.events.publish(event)

    def answered(self, calls: Sequence[ToolCall], decisions: Iterable[Decision], by: str | None) -> None:
        """Publish ``decisions`` on ``calls``."""
        names = {c.id: c.name for c in calls}
        for decision in decisions:
            self.publish(ApprovalAnswered(decision.call_id, names.get(decision.call_id, ""), decision.approved,
                                          decision.reason, by))

    def answer_live(self, decisions: Sequence[Decision], by: str | None) -> list[Decision]:
        """Hand the decisions on calls a running program waits on to it; the others, in order."""
        rest = []
        for decision in decisions:
            asked = self._live.get(decision.call_id)
            if asked is None or decision.call_id in asked.decisions:
                rest.append(decision)
                continue
            asked.decisions[decision.call_id] = decision
            self.answered(asked.calls, (decision,), by)
            if len(asked.decisions) == len(asked.calls):
                asked.done.set()
        return rest

    async def __call__(self, calls: tuple[ToolCall, ...]) -> list[Decision]:
        """The run's approver: publish the request and wait for ``answer_live`` (or the time to run out)."""
        asked = _Asked(calls, time.time() + self.timeout)
        for call in calls:
            self._live[call.id] = asked
        try:
            self.publish(ApprovalRequested(self.message_id, calls, asked.deadline, live=True))
            with anyio.move_on_after(self.timeout):
                await asked.done.wait()
        finally:
            for call in calls:
                self._live.pop(call.id, None)
        late = [Decision.deny(c.id, timed_out(self.timeout)) for c in calls if c.id not in asked.decisions]
        if late:
            self.answered(calls, late, None)
        return [asked.decisions.get(c.id) or next(d for d in late if d.call_id == c.id) for c in calls]
