"""An agent for the ``MCPConduit`` tests, served over MCP stdio by ``python -m tests.session.mcp.agent_fixture``.

The model is a ``provider.Function``: ``define WORD`` makes it call ``lookup``; ``nap N`` calls ``nap``;
``fail`` makes the model raise; ``loop`` makes it call tools until ReAct's cap (a degraded run); anything else
is echoed. ``lookup`` prints to stdout and logs, which must not reach the MCP stream on stdio.
"""

from __future__ import annotations

import functools
from typing import Any

import anyio

from cognitive import new_turn_processor, react_factory
from loop import Request, Role, tool, tracing
from provider import Function, tool_call
from session import Manager, step_factory
from session.mcp import MCPConduit

_log = tracing.logger("tests.agent")


@tool
async def lookup(word: str) -> str:
    """Look a word up."""
    print(f"stray output from lookup({word})")  # noqa: T201 - on purpose: stdio must stay clean
    _log.warning("looking up", word=word)
    return f"{word}: a word"


@tool
async def nap(seconds: float) -> str:
    """Sleep a while."""
    await anyio.sleep(seconds)
    return "rested"


def reply(request: Request) -> Any:
    first = next(t.text for t in request.turns if t.role is Role.USER)
    last = request.turns[-1]
    if request.options.tool_choice == "none":
        return "I gave up."
    if first.startswith("fail"):
        raise RuntimeError("the model is down")
    if first.startswith("loop"):
        return tool_call("lookup", {"word": "again"})
    if last.role is Role.TOOL:
        return f"found {last.tool_results[0].content}"
    if first.startswith("define "):
        return tool_call("lookup", {"word": first.split()[1]})
    if first.startswith("nap "):
        return tool_call("nap", {"seconds": float(first.split()[1])})
    return f"you said: {first}"


def make_manager() -> Manager:
    processor = new_turn_processor(functools.partial(react_factory, max_turns=2))
    return Manager(processor, provider=Function(reply), make_step=step_factory([lookup, nap]))


async def main() -> None:
    async with make_manager() as manager:
        await MCPConduit(tool="ask", name="agent").serve(manager)


if __name__ == "__main__":
    anyio.run(main)  # structlog is left writing to stdout on purpose: the conduit must keep it off the wire
