"""A tiny agent module for the command-line tests: ``python -m session chat tests.session.agents:make_agent``."""

import anyio

from cognitive import ReAct
from loop import Request, Role, TurnExecutor, tool
from provider import Function, tool_call


@tool
async def wait(seconds: float) -> str:
    """Wait a while."""
    await anyio.sleep(seconds)
    return f"waited {seconds} s"


TOOLS = [wait]


def make_agent(executor: TurnExecutor) -> ReAct:
    return ReAct(executor)


def reply(request: Request):
    """'wait N' makes the model call the wait tool; anything else is echoed upper-cased."""
    last = request.turns[-1]
    if last.role is Role.USER and last.text.startswith("wait "):
        return tool_call("wait", {"seconds": float(last.text.split()[1])})
    if last.role is Role.TOOL:
        return f"done: {last.tool_results[0].content}"
    return last.text.upper()


def demo_provider() -> Function:
    return Function(reply)


def not_a_pattern(executor: TurnExecutor) -> str:
    """A factory returning something that is not a pattern: the command line refuses it at start-up."""
    return "not a pattern"


def no_executor() -> ReAct:
    """A factory that takes no step: the command line refuses it at start-up."""
    raise AssertionError("never called without a step")
