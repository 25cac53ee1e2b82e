"""Approvals over MCP: who the MCP conduit's caller is, and how its client is asked to approve tool calls.

A call of the agent's that needs approval (``loop.require_approval``) is put to the MCP client as an elicitation:
one form listing every call waiting (each tool's name and arguments) with a yes/no field per call, and a
``reason`` field shown to the agent with any denial. How the form reaches the client depends on the protocol
version the client speaks:

- 2026-07-28 and later have no server-to-client requests while a call runs: the ``tools/call`` returns an
  ``input_required`` result carrying the form and a sealed ``requestState`` naming the conversation, and the
  client calls again with the answer (the SDK's ``Client.call_tool`` does so by itself). The conversation is
  stored meanwhile, with the calls waiting in it; the retry opens it again, decides, and the run goes on.
- Earlier versions have the server send ``elicitation/create`` during the call, and the answer comes back in it.

A client that declines (or cancels) the form denies every call on it. A client that does not declare the
elicitation capability cannot be asked: the calls are denied, saying why, and the run goes on, so the answer it
gets is the agent's, after the denial. Calls that wait live (made off the conversation's main line, in a branch
or a code-action program) are asked the same way on the earlier versions; on the later ones there is no way to
ask while the call runs, and they are denied, saying so.

Over HTTP the caller is the bearer token's owner (``session._bearer.owner_of``, ``anonymous`` without a token),
as for the HTTP conduit; over stdio (and in-process) it is the local user, ``Caller("local", "local")``.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import attrs
import mcp_types as types
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp_types.version import is_version_at_least

from loop import Caller, Decision, ToolCall, tracing
from session._bearer import caller_in

_log = tracing.logger("session.mcp")

LOCAL = Caller("local", "local")
"""The caller over stdio (and in-process): the user of the machine the conduit runs on."""
INPUT_REQUIRED_VERSION = "2026-07-28"
"""The first protocol version that elicits through ``input_required`` results rather than requests."""
ANSWER = "approval"
"""The key of the elicitation in an ``input_required`` result, and of its answer on the retry."""

NO_ELICITATION = "the MCP client cannot be asked for approval (it does not support elicitation)"
DECLINED = "the MCP client declined"
CANCELLED = "the MCP client cancelled"
NOT_LIVE = ("the MCP client cannot be asked while the agent runs (its protocol version asks only when a call "
            "returns, and this call was made off the conversation's main line)")
MAX_ARGUMENTS = 2000  # characters of a call's arguments shown in the form


def caller_of(ctx: Any) -> Caller:
    """Who sent the MCP request ``ctx`` answers: the bearer token's owner over HTTP (its id and namespace, as the
    HTTP conduit keys that token's sessions), the local user otherwise."""
    request = ctx.request  # the HTTP request the call came in (a Starlette Request); None over stdio
    return LOCAL if request is None else caller_in(request.scope)


def can_elicit(ctx: Any) -> bool:
    """Whether the client declared it answers form elicitations (a bare ``elicitation: {}`` means forms)."""
    capabilities = ctx.session.client_capabilities
    asked = None if capabilities is None else capabilities.elicitation
    return asked is not None and (asked.form is not None or asked.url is None)


def asks_by_retry(ctx: Any) -> bool:
    """Whether the client is asked through ``input_required`` results (2026-07-28 and later)."""
    version = ctx.protocol_version
    return isinstance(version, str) and is_version_at_least(version, INPUT_REQUIRED_VERSION)


def boundary(name: str, ttl: float) -> RequestStateBoundary:
    """The middleware that seals the ``requestState`` of ``input_required`` results (under a key of this process)
    and checks it on the retry: unaltered, younger than ``ttl`` seconds, for the same tool call, and from the same
    caller. Another token cannot answer a conversation it did not start."""
    security = RequestStateSecurity(keys=[os.urandom(32)], ttl=ttl,
                                    bind_principal=lambda ctx: caller_of(ctx).namespace)
    return RequestStateBoundary(security, default_audience=name)


def _key(index: int) -> str:
    return f"call_{index + 1}"


def form(calls: Sequence[ToolCall]) -> types.ElicitRequestFormParams:
    """The elicitation asking about ``calls``: a yes/no field per call (``call_1``, ...), and a ``reason``."""
    lines = []
    properties: dict[str, Any] = {}
    for index, call in enumerate(calls):
        arguments = call.arguments if len(call.arguments) <= MAX_ARGUMENTS else call.arguments[:MAX_ARGUMENTS] + "…"
        lines.append(f"{index + 1}. {call.name} {arguments}")
        properties[_key(index)] = {"type": "boolean", "title": f"Run {call.name}?",
                                   "description": f"{call.name} with {arguments}", "default": False}
    properties["reason"] = {"type": "string", "title": "Reason",
                            "description": "why, if you deny a call (the agent reads it)"}
    one = len(calls) == 1
    message = (("The agent asks to run this tool call, which needs" if one else
                f"The agent asks to run these {len(calls)} tool calls, which need") + " your approval:\n"
               + "\n".join(lines) + ("\nApprove it (true) or deny it (false)." if one else
                                     "\nApprove (true) or deny (false) each one."))
    schema = {"type": "object", "properties": properties, "required": [_key(i) for i in range(len(calls))]}
    return types.ElicitRequestFormParams(message=message, requested_schema=schema)


def deny_all(calls: Sequence[ToolCall], reason: str) -> list[Decision]:
    return [Decision.deny(c.id, reason) for c in calls]


def decisions(calls: Sequence[ToolCall], answer: types.ElicitResult | None) -> list[Decision]:
    """What the client's ``answer`` to ``form(calls)`` decides: a call is approved only by a ``true`` in its field;
    a declined or cancelled form denies them all."""
    if answer is None:
        return deny_all(calls, "the MCP client sent no answer")
    if answer.action == "decline":
        return deny_all(calls, DECLINED)
    if answer.action != "accept":
        return deny_all(calls, CANCELLED)
    content = answer.content or {}
    reason = content.get("reason")
    reason = reason.strip() if isinstance(reason, str) else ""
    return [Decision.approve(c.id) if content.get(_key(i)) is True else Decision.deny(c.id, reason)
            for i, c in enumerate(calls)]


async def elicit(ctx: Any, calls: Sequence[ToolCall], deadline: float | None = None) -> list[Decision]:
    """Ask the client about ``calls`` with an ``elicitation/create`` request during the call (protocol versions
    before 2026-07-28); denied, saying why, when it cannot be asked, or has not answered by ``deadline`` (seconds
    since the epoch: the session's own, less a moment, so that the denial is this call's to give)."""
    if not can_elicit(ctx):
        return deny_all(calls, NO_ELICITATION)
    if asks_by_retry(ctx):
        return deny_all(calls, NOT_LIVE)
    params = form(calls)
    answer = None
    wait = math.inf if deadline is None else max(0.0, deadline - time.time() - _MARGIN)
    try:
        with anyio.move_on_after(wait):
            answer = await ctx.session.elicit_form(params.message, params.requested_schema,
                                                   related_request_id=ctx.request_id)
    except Exception as exc:  # an error answer, or no channel to ask on: nobody approved
        _log.info("approval not asked", error=repr(exc))
        return deny_all(calls, f"the MCP client could not be asked: {exc}")
    if answer is None:
        return deny_all(calls, f"the MCP client gave no answer within {wait:.0f} seconds")
    return decisions(calls, answer)


_MARGIN = 0.5  # seconds before the session's deadline when an unanswered elicitation is given up


@attrs.frozen
class Asked:
    """What the ``requestState`` of an ``input_required`` result holds: the conversation (``session``) whose
    ``calls`` (their ids) wait for the answer."""

    session: str
    calls: tuple[str, ...]

    def result(self, calls: Sequence[ToolCall]) -> types.InputRequiredResult:
        """The ``input_required`` result asking about ``calls`` (sealed by ``boundary`` on its way out)."""
        request = types.ElicitRequest(params=form(calls))
        state = json.dumps({"session": self.session, "calls": list(self.calls)})
        return types.InputRequiredResult(input_requests={ANSWER: request}, request_state=state)

    @classmethod
    def from_state(cls, state: str) -> Asked:
        """The ``Asked`` a ``result`` wrote (``boundary`` has checked it is ours); ``ValueError`` if it is not."""
        try:
            data = json.loads(state)
            return cls(str(data["session"]), tuple(str(c) for c in data["calls"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"not a request state of this server: {exc}") from None


def answer_of(responses: Mapping[str, Any] | None) -> types.ElicitResult | None:
    """The client's answer to the form, from the ``input_responses`` of its retry."""
    answer = (responses or {}).get(ANSWER)
    if isinstance(answer, types.ElicitResult) or answer is None:
        return answer
    try:
        return types.ElicitResult.model_validate(answer if isinstance(answer, Mapping) else answer.model_dump())
    except (ValueError, AttributeError):  # an answer of another kind: no answer to the form
        return None
