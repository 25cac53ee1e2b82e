"""The HTTP conduit's approval routes: what waits for a person, and the answer.

::

    GET    /sessions/{id}/approvals     200 {"approvals": [...]}       the calls waiting for approval
    POST   /sessions/{id}/approvals     202 {"message_id"}             approve or deny them {"decisions": [...]}

A request is an ``approval_requested`` event on the session's stream too; the answer is published as
``approval_answered`` events. Calls the conversation keeps open survive a restart: after one, ``GET`` still lists
them and ``POST`` resumes the run (reopening the session). Calls a running program waits on are answered at once
(``message_id`` is then ``null``). Whoever answers is the token's caller, kept with the decisions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from loop import Decision, UsageError
from session._bearer import caller_in
from session._approvals import kept_request
from session._events import ApprovalRequested
from session.http._guards import Problem
from session.http._wire import approval_requested, json_response

if TYPE_CHECKING:
    from session.http._routes import SessionRoutes

MAX_DECISIONS = 256
MAX_REASON = 2000


def _decisions(data: dict[str, Any]) -> list[Decision]:
    raw = data.get("decisions")
    if not isinstance(raw, list) or not raw or len(raw) > MAX_DECISIONS:
        raise Problem(422, "invalid_decisions", f"'decisions' must be a list of 1 to {MAX_DECISIONS} objects "
                                                "{\"call_id\", \"approved\", \"reason\"}")
    decisions = []
    for index, item in enumerate(raw):
        where = f"decisions[{index}]"
        if not isinstance(item, dict):
            raise Problem(422, "invalid_decisions", f"{where} must be an object")
        call_id, approved, reason = item.get("call_id"), item.get("approved"), item.get("reason", "")
        if not isinstance(call_id, str) or not call_id:
            raise Problem(422, "invalid_decisions", f"{where}.call_id must be a non-empty string")
        if not isinstance(approved, bool):
            raise Problem(422, "invalid_decisions", f"{where}.approved must be true or false")
        if not isinstance(reason, str) or len(reason) > MAX_REASON:
            raise Problem(422, "invalid_decisions", f"{where}.reason must be a string of at most {MAX_REASON} "
                                                    "characters")
        decisions.append(Decision(call_id, approved, reason))
    return decisions


class ApprovalRoutes:
    """The approval routes, on the session routes' sessions, owners and logs."""

    def __init__(self, sessions: SessionRoutes) -> None:
        self.sessions = sessions

    def routes(self) -> list[Route]:
        # One route for both methods, so that a 405 lists them both in its Allow header.
        return [Route("/sessions/{id}/approvals", self.dispatch, methods=["GET", "POST"])]

    async def dispatch(self, request: Request) -> Response:
        return await (self.answer(request) if request.method == "POST" else self.pending(request))

    async def _waiting(self, request: Request) -> tuple[Any, tuple[ApprovalRequested, ...]]:
        routes = self.sessions
        owned = await routes._owned(request)
        session = routes._open(owned)
        if session is not None:
            return owned, session.pending_approvals()
        state = await routes.manager.history(owned.key)  # closed: read from the store, opening nothing
        kept = None if state is None else kept_request(state, routes.manager.approval_timeout)
        return owned, () if kept is None else (kept,)

    async def pending(self, request: Request) -> Response:
        _, waiting = await self._waiting(request)
        return json_response({"approvals": [approval_requested(r) for r in waiting]})

    async def answer(self, request: Request) -> Response:
        routes = self.sessions
        decisions = _decisions(await routes._body(request, required=True))
        owned, waiting = await self._waiting(request)
        open_ids = [c.id for r in waiting for c in r.calls]
        unknown = [d.call_id for d in decisions if d.call_id not in open_ids]
        if unknown:
            shown = ", ".join(open_ids) or "none"
            raise Problem(409, "not_waiting", f"no call {', '.join(unknown)} waits for approval in this session; "
                                              f"the calls waiting are: {shown}"[:1000])
        kept = [c.id for r in waiting if not r.live for c in r.calls]
        given = [d.call_id for d in decisions if d.call_id in kept]
        if given and sorted(given) != sorted(kept):
            raise Problem(422, "invalid_decisions", "the calls the conversation keeps open are decided together: "
                                                    f"decide each of {', '.join(kept)}")
        session = await routes._live(request, owned)
        try:
            message_id = session.approve(decisions, caller=caller_in(request.scope))
        except UsageError as exc:
            raise Problem(422, "invalid_decisions", str(exc)) from None
        return json_response({"message_id": message_id}, 202)
