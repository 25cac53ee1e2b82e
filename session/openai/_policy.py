"""What the OpenAI-compatible endpoint does with tool calls that need a person's approval.

A Chat Completions client is a program, not a person, and the protocol has no way to ask it for approval that it
would understand as such; nor will it come back to answer a call the conversation kept open. So the endpoint
decides those calls as they come, by the server's policy: ``"deny"`` (the default: the model reads that the call
was denied, and answers without it) or ``"allow"`` (the calls run, for a server whose clients are trusted as much
as a person who approves). Approvals that need a person belong on the HTTP conduit's approval routes, the
terminal, or an MCP client that supports elicitation.
"""

from __future__ import annotations

from loop import Approver, Decision, ToolCall, UsageError

POLICIES = ("deny", "allow")
DENIED = ("the OpenAI-compatible endpoint cannot ask a person for approval, and the server's policy denies calls "
          "that need it there")
ALLOWED = "allowed by the server's approval policy for the OpenAI-compatible endpoint"


def check_policy(policy: object) -> str:
    """``policy`` when it is one the endpoint knows, else ``UsageError``."""
    if policy not in POLICIES:
        raise UsageError(f"approvals must be one of {', '.join(map(repr, POLICIES))}, got {policy!r}")
    return str(policy)


def policy_approver(policy: str) -> Approver:
    """The approver deciding every call that needs approval as ``policy`` says."""
    approve = check_policy(policy) == "allow"

    async def decide(calls: tuple[ToolCall, ...]) -> list[Decision]:
        if approve:
            return [Decision.approve(c.id, ALLOWED) for c in calls]
        return [Decision.deny(c.id, DENIED) for c in calls]

    return decide
