"""``a2a_tool``: a remote A2A agent as a tool a local pattern can call.

    tool = await a2a_tool("https://agents.example/research", token=os.environ["RESEARCH_TOKEN"])
    agent = ReAct(Step(provider, tools=[tool]))

The agent is found by its card (``/.well-known/agent-card.json`` under the URL), which gives the tool's name and
description unless they are set. A call sends the model's ``message`` as a new task in a new conversation, with
a2a-sdk's client (streaming when the card says the agent can), and returns the remote agent's answer: the text
of its artifacts, or of its final status message. Anything short of ``completed`` is an error the model reads
(``A2AToolError``, which the step turns into an error result): ``failed`` (a degraded answer among them, with
what the remote agent says about it and the answer it wrote), ``canceled``, ``rejected``, ``input-required``
(the remote agent asks for something a single call cannot give), and an agent that cannot be reached or
refuses the call.

A call never waits longer than ``timeout`` seconds, and a call that is cancelled (the step's own tool timeout,
an interrupted run) or times out cancels the remote task too (``tasks/cancel``, at most a few seconds more).

The ``token`` is sent as ``Authorization: Bearer`` to the card's URL and to the agent, and only if the card
names an endpoint on the origin the card came from: a card pointing elsewhere does not get the token.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing, asynccontextmanager
from typing import Any, cast

import anyio
import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text, get_message_text
from a2a.types import (AgentCard, CancelTaskRequest, GetTaskRequest, ListTasksRequest, Message, Part, Role,
                       SendMessageRequest, StreamResponse, Task, TaskState)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.errors import A2AError

from loop import LoopError, ToolSpec, UsageError
from loop.checks import positive_number

__all__ = ["A2ATool", "A2AToolError", "a2a_tool"]

CANCEL_TIMEOUT = 5.0  # seconds a cancelled call gives the remote agent to hear of it
_LOOKS = 5  # times a cancelled call looks for a task the agent had not named yet (over about 1.5 s)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_DONE = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
                   TaskState.TASK_STATE_REJECTED, TaskState.TASK_STATE_INPUT_REQUIRED,
                   TaskState.TASK_STATE_AUTH_REQUIRED})
SCHEMA = {
    "type": "object",
    "properties": {"message": {"type": "string", "minLength": 1,
                               "description": "the complete, self-contained request for the remote agent"}},
    "required": ["message"],
    "additionalProperties": False,
}


class A2AToolError(LoopError):
    """Raised when a remote A2A agent cannot be found or reached, refuses a call, takes longer than the tool's
    timeout, or ends its task in a state other than completed."""


def state_name(state: int) -> str:
    """An A2A task state as the protocol's 0.3 spelling has it (``input-required``), the way people read it."""
    return TaskState.Name(cast(TaskState, state)).removeprefix("TASK_STATE_").lower().replace("_", "-")


class _Followed:
    """What a call learned of its task from the responses: its id, state, artifacts and last status message."""

    def __init__(self) -> None:
        self.task_id = ""
        self.state: int = TaskState.TASK_STATE_UNSPECIFIED
        self.message = ""
        self.outcome: str | None = None  # the run's own status, when the remote agent says (this project's do)
        self.artifacts: dict[str, str] = {}  # artifact id: its text so far
        self.reply: str | None = None  # a message answering without a task

    @property
    def done(self) -> bool:
        return self.reply is not None or self.state in _DONE

    def take(self, response: StreamResponse) -> None:
        if response.HasField("task"):
            self.take_task(response.task)
        elif response.HasField("status_update"):
            update = response.status_update
            self.task_id = update.task_id or self.task_id
            self._status(update.status.state, update.status.message if update.status.HasField("message") else None)
            self._outcome(update.metadata)
        elif response.HasField("artifact_update"):
            update = response.artifact_update
            self.task_id = update.task_id or self.task_id
            key = update.artifact.artifact_id
            text = get_artifact_text(update.artifact)
            self.artifacts[key] = self.artifacts.get(key, "") + text if update.append else text
        elif response.HasField("message"):
            self.reply = get_message_text(response.message)

    def take_task(self, task: Task) -> None:
        self.task_id = task.id or self.task_id
        self._status(task.status.state, task.status.message if task.status.HasField("message") else None)
        self._outcome(task.metadata)
        for artifact in task.artifacts:
            self.artifacts[artifact.artifact_id] = get_artifact_text(artifact)

    def _outcome(self, metadata: Any) -> None:
        if "outcome" in metadata:
            try:
                self.outcome = str(metadata["outcome"]["status"])
            except (KeyError, TypeError, ValueError):
                pass

    def _status(self, state: int, message: Message | None) -> None:
        self.state = state
        self.message = get_message_text(message) if message is not None else ""  # this status's own words

    def answer(self, agent: str) -> str:
        """The remote agent's answer; ``A2AToolError`` when the task did not complete with one."""
        if self.reply is not None:
            if not self.reply.strip():
                raise A2AToolError(f"the remote agent {agent!r} answered with no text")
            return self.reply
        written = "\n\n".join(t for t in self.artifacts.values() if t.strip())
        if self.state == TaskState.TASK_STATE_COMPLETED:
            answer = written or self.message
            if not answer.strip():
                raise A2AToolError(f"the remote agent {agent!r} completed its task without a text answer")
            return answer
        said = self.message or "it gave no reason"
        status = self.outcome
        how = f"{state_name(self.state)} ({status})" if status and status not in ("ok", "failed") else \
            state_name(self.state)
        text = f"the remote agent {agent!r} ended its task {how}: {said}"
        if written:
            text += f"\n\nWhat it wrote (not a complete answer):\n{written}"
        raise A2AToolError(text)


class A2ATool:
    """A remote A2A agent, described by its ``card``, as a ``loop.Tool`` taking ``{"message": "..."}`` (see the
    module docstring). ``name`` and ``description`` default to the card's; ``token`` is sent as a bearer token;
    a call takes at most ``timeout`` seconds. ``transport`` is the httpx transport to reach it by (the network,
    by default)."""

    def __init__(self, card: AgentCard, *, name: str | None = None, description: str | None = None,
                 token: str | None = None, timeout: float = 300.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if not isinstance(card, AgentCard):
            raise UsageError(f"A2ATool takes an a2a AgentCard (see a2a_tool to find one by URL), got {card!r}")
        if token is not None and (not isinstance(token, str) or not token or any(c.isspace() for c in token)):
            raise UsageError("token must be a non-empty string without spaces, or None")
        tool_name = name if name is not None else (_UNSAFE.sub("_", card.name).strip("_")[:64] or "remote_agent")
        if not isinstance(tool_name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", tool_name):
            raise UsageError(f"tool name must be letters, digits, '_', '-' or '.', got {tool_name!r}")
        if description is not None and (not isinstance(description, str) or not description.strip()):
            raise UsageError("description must be a non-empty string, or None for the card's")
        said = card.description.strip().rstrip(".") or "an AI agent"
        about = description or (f"Ask the remote agent {card.name!r}: {said}. Send a complete, self-contained "
                                "request in 'message'; it answers in text. Each call is a new conversation: it "
                                "remembers nothing of earlier calls.")
        self.card = card
        self.spec = ToolSpec(tool_name, about, SCHEMA)
        self.timeout: float | None = float(positive_number("timeout", timeout, unit="seconds"))
        self._token = token
        self._transport = transport

    @asynccontextmanager
    async def _client(self) -> AsyncIterator[Client]:
        headers = {"authorization": f"Bearer {self._token}"} if self._token else {}
        async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(self.timeout),
                                     transport=self._transport) as http:
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(self.card)
            try:
                yield client
            finally:
                await client.close()

    async def call(self, arguments: Mapping[str, Any]) -> str:
        """Send ``arguments["message"]`` to the remote agent as a new task and return its answer."""
        text = arguments.get("message") if isinstance(arguments, Mapping) else None
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"tool {self.spec.name!r} takes 'message': a non-empty string")
        agent = self.card.name
        # A conversation of the call's own, named here: a call cancelled before the agent named its task can
        # still find the task to cancel it.
        context_id = uuid.uuid4().hex
        message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, context_id=context_id,
                          parts=[Part(text=text)])
        followed = _Followed()
        timeout = cast(float, self.timeout)
        try:
            async with self._client() as client:
                refused = False  # the agent answered with an error: no task of its own is left to look for
                try:
                    with anyio.fail_after(timeout):
                        stream = cast(Any, client.send_message(SendMessageRequest(message=message)))
                        async with aclosing(stream):
                            async for response in stream:
                                followed.take(response)
                        if followed.task_id and not followed.done:  # the stream ended early: ask once
                            followed.take_task(await client.get_task(GetTaskRequest(id=followed.task_id)))
                except A2AError:
                    refused = True
                    raise
                finally:
                    if not followed.done and (followed.task_id or not refused):
                        await _cancel(client, followed.task_id, context_id)
        except TimeoutError:
            raise A2AToolError(f"the remote agent {agent!r} did not finish within {timeout:g} seconds; its task was "
                               "canceled") from None
        except A2AError as exc:
            raise A2AToolError(f"the remote agent {agent!r} could not be reached or refused the call: "
                               f"{type(exc).__name__}: {exc}") from exc
        if not followed.done:
            raise A2AToolError(f"the remote agent {agent!r} stopped answering before its task ended (it was "
                               f"{state_name(followed.state)})")
        return followed.answer(agent)

    def __repr__(self) -> str:
        return f"A2ATool({self.spec.name!r}, agent={self.card.name!r})"


async def _cancel(client: Client, task_id: str, context_id: str) -> None:
    """Cancel the remote task (best effort, even while the call itself is being cancelled, for at most
    ``CANCEL_TIMEOUT`` seconds). Not named yet, it is looked for among the tasks of the call's conversation, a
    few times over while the agent may still be making it (a 1.0 agent lists tasks; an older one does not)."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_TIMEOUT):
        try:
            ids = [task_id] if task_id else []
            for attempt in range(_LOOKS if not ids else 0):
                listed = await client.list_tasks(ListTasksRequest(context_id=context_id))
                ids = [t.id for t in listed.tasks if t.status.state not in _DONE]
                if ids:
                    break
                await anyio.sleep(0.05 * 2 ** attempt)
            for found in ids:
                await client.cancel_task(CancelTaskRequest(id=found))
        except A2AError:
            pass  # it ended meanwhile, or the agent is gone or cannot list tasks: nothing more can be done


async def a2a_tool(url: str, *, name: str | None = None, description: str | None = None, token: str | None = None,
                   timeout: float = 300.0, card_path: str = AGENT_CARD_WELL_KNOWN_PATH,
                   transport: httpx.AsyncBaseTransport | None = None) -> A2ATool:
    """The A2A agent at ``url`` (its card at ``url`` + ``card_path``) as an ``A2ATool``; ``A2AToolError`` when the
    card cannot be had within ``timeout`` seconds, or names an endpoint on another origin while a ``token`` is
    given. See ``A2ATool`` for the rest."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise UsageError(f"url must be the agent's http(s) URL, got {url!r}")
    positive_number("timeout", timeout, unit="seconds")
    headers = {"authorization": f"Bearer {token}"} if isinstance(token, str) and token else {}
    try:
        async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout), transport=transport) as http:
            with anyio.fail_after(timeout):
                card = await A2ACardResolver(http, url, card_path).get_agent_card()
    except TimeoutError:
        raise A2AToolError(f"the agent card at {url} did not arrive within {timeout:g} seconds") from None
    except A2AError as exc:
        raise A2AToolError(f"could not read the agent card at {url}: {exc}") from exc
    if token is not None:
        where = httpx.URL(url)
        for interface in card.supported_interfaces:
            there = httpx.URL(interface.url)
            if (there.scheme, there.host, there.port) != (where.scheme, where.host, where.port):
                raise A2AToolError(f"the agent card at {url} names an endpoint on another origin "
                                   f"({interface.url}); the token is only sent where it was given for")
    return A2ATool(card, name=name, description=description, token=token, timeout=timeout, transport=transport)
