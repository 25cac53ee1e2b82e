"""The agent the kill test serves: ``python -m session serve tests.session.durable_agent:make_agent``.

Its offline model is slow and deterministic: every reply waits ``MODEL_SECONDS``; a message ``message N`` with N a
multiple of 3 makes it call the ``note`` tool first (which waits ``TOOL_SECONDS``); every answer names the
message it answers, so the test can tell which answer belongs to which message.
"""

import anyio

from cognitive import ReAct
from loop import Request, Role, TurnExecutor, tool
from provider import Function, tool_call

MODEL_SECONDS = 0.6
TOOL_SECONDS = 0.3


@tool
async def note(text: str) -> str:
    """Note something down."""
    await anyio.sleep(TOOL_SECONDS)
    return f"noted {text}"


TOOLS = [note]


def make_agent(executor: TurnExecutor) -> ReAct:
    return ReAct(executor)


async def reply(request: Request):  # type: ignore[no-untyped-def]
    await anyio.sleep(MODEL_SECONDS)
    asked = next(t for t in reversed(request.turns) if t.role is Role.USER)
    if request.turns[-1].role is Role.USER and int(asked.text.split()[-1]) % 3 == 0:
        return tool_call("note", {"text": asked.text})
    return f"answer to {asked.text}"


def demo_provider() -> Function:
    return Function(reply)
