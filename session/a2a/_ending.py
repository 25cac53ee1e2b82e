"""How an A2A task ends: a run's result (the conversation it left, or what it raised) as an ``Ending``, the task
state, status message, answer and metadata the executor publishes.

A2A's terminal states are ``completed``, ``failed``, ``canceled`` and ``rejected``; ``input-required`` pauses a
task until the client replies in it. The run's outcome maps onto them so that nothing short of a clean answer
reads as a success:

- ``ok`` with a written answer: ``completed``, the answer as the ``answer`` artifact (a text part).
- ``degraded`` (a budget or cap stopped the run, and the answer was written with what the pattern had):
  ``failed``. A2A has no "completed, but worse than asked" state, and a generic client reads only the state:
  ``completed`` would pass a degraded answer off as a clean one, which no conduit of this project does. The
  answer is still attached as the ``answer`` artifact, and the status message says the run did not finish and
  why; the metadata's ``outcome`` says ``degraded``.
- ``failed`` (the answer turn says so), or no written answer: ``failed``, with the reason.
- Tool calls waiting for a person's approval: ``input-required``, the status message naming the calls and how
  to answer (``session.a2a._approvals``); the reply, in the same task, decides them and the run goes on.
- A guardrail that tripped: ``rejected`` (the agent will not go on with this request), with the guardrail's
  notice; the metadata's ``guardrail`` holds ``{"check", "stage", "reason"}``.
- A run that raised: ``failed``, with what went wrong (never a stack trace); a server shutting down says so.
- A run stopped by ``tasks/cancel``, or interrupted from another conduit: ``canceled``.

Every final status carries ``metadata["outcome"] = {"status", "reason"}``, the run's own words for how it ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from a2a.types import TaskState

from cognitive import GuardrailTripped
from loop import State, ToolCall, awaiting_approval
from session._session import SessionClosed
from session.openai._answer import failure

SHUTTING_DOWN = ("The server is shutting down; the run was stopped before it finished. Send the message again "
                 "once the server is back.")
CANCELED = "The task was canceled; the run was stopped."
CANCELED_BEFORE = "The task was canceled before its run started; nothing ran."


@attrs.frozen
class Ending:
    """How a task ends: its ``state``, the status ``message`` shown with it (empty for none), the ``answer``
    published as the ``answer`` artifact (``None`` for none), and the status ``metadata``."""

    state: TaskState
    message: str = ""
    answer: str | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def name(self) -> str:
        """The state as A2A 1.0 spells it (``TASK_STATE_COMPLETED``)."""
        return TaskState.Name(self.state)


def _outcome(status: str, reason: str = "") -> dict[str, Any]:
    return {"outcome": {"status": status, "reason": reason}}


def finished(state: State, *, prompt: str = "") -> Ending:
    """The ending of a run that returned the conversation ``state``; ``prompt`` is the status message of calls
    waiting for approval (``session.a2a._approvals.prompt``)."""
    waiting = awaiting_approval(state)
    if waiting:
        return Ending(TaskState.TASK_STATE_INPUT_REQUIRED, prompt,
                      metadata={**_outcome("pending", "tool calls wait for approval"), "approvals": calls(waiting)})
    outcome = state.outcome
    status = "ok" if outcome is None else outcome.status
    reason = "" if outcome is None else outcome.reason
    answer = state.answer
    if status == "ok":
        if answer:
            return Ending(TaskState.TASK_STATE_COMPLETED, answer=answer, metadata=_outcome("ok"))
        return Ending(TaskState.TASK_STATE_FAILED, "The agent finished without a written answer.",
                      metadata=_outcome("failed", "no written answer"))
    if status == "degraded":
        why = reason or "a budget or cap stopped it"
        return Ending(TaskState.TASK_STATE_FAILED,
                      f"The agent did not finish (degraded): {why}. The answer it wrote with what it had is in the "
                      "'answer' artifact; do not take it for a complete one.",
                      answer=answer or None, metadata=_outcome("degraded", why))
    if status == "pending":  # calls left for a client to run: an A2A client is never offered tools to run
        return Ending(TaskState.TASK_STATE_FAILED, "The run stopped with tool calls left open that nobody here can "
                                                   "answer.", metadata=_outcome("pending", reason))
    return Ending(TaskState.TASK_STATE_FAILED, f"The agent run failed: {reason or 'no reason given'}",
                  metadata=_outcome(status, reason))


def raised(error: Exception, *, canceled: bool = False, stopping: bool = False) -> Ending:
    """The ending of a run that raised ``error``: ``canceled`` when the task's cancel stopped it, ``stopping``
    when the server is shutting down."""
    if canceled:
        return Ending(TaskState.TASK_STATE_CANCELED, CANCELED, metadata=_outcome("canceled", "canceled by the client"))
    if stopping:
        return Ending(TaskState.TASK_STATE_FAILED, SHUTTING_DOWN,
                      metadata={**_outcome("failed", "server shutting down"), "error": {"code": "server_shutting_down"}})
    if isinstance(error, GuardrailTripped):
        return Ending(TaskState.TASK_STATE_REJECTED, error.notice,
                      metadata={**_outcome("failed", error.notice), "guardrail": error.to_dict()})
    if isinstance(error, SessionClosed):  # interrupted by someone else (the session routes), or closed
        return Ending(TaskState.TASK_STATE_CANCELED, f"The run was interrupted before it finished: {error}",
                      metadata=_outcome("canceled", "interrupted"))
    answer = failure(error)
    code = answer.code or "run_failed"
    return Ending(TaskState.TASK_STATE_FAILED, answer.message,
                  metadata={**_outcome("failed", answer.message), "error": {"code": code}})


def refused(message: str, *, code: str, state: TaskState = TaskState.TASK_STATE_FAILED) -> Ending:
    """The ending of a message that never reached a run (its conversation could not be opened, its parts are
    not ones this agent reads): ``state`` (``failed``, or ``rejected`` for a request it will never take)."""
    return Ending(state, message, metadata={**_outcome("failed", message), "error": {"code": code}})


def never_ran() -> Ending:
    """The ending of a task canceled while its message waited for the conversation: it never ran."""
    return Ending(TaskState.TASK_STATE_CANCELED, CANCELED_BEFORE, metadata=_outcome("canceled", "canceled before it ran"))


def calls(waiting: tuple[ToolCall, ...]) -> list[dict[str, str]]:
    """Tool calls as metadata: ``[{"id", "name", "arguments"}]`` (the arguments as the model wrote them)."""
    return [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in waiting]
