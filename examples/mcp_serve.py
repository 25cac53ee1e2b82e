"""An agent served over MCP (stdio), so any MCP client, or another agent, can call it as a tool.

    python examples/mcp_serve.py      # speaks MCP on stdin/stdout; logs go to stderr

Give an MCP client (a desktop app, an IDE) the command ``python examples/mcp_serve.py``, or hand the agent to
another agent as a tool::

    async with MCPTools(MCPStdioServer(sys.executable, ["examples/mcp_serve.py"], name="calculator")) as tools:
        ...  # the other agent now has a tool named calculator_calculate

The server has one tool, ``calculate``: a question in, the agent's answer out, with a progress notification
per model turn and tool call. The agent is ReAct over ``add`` and ``multiply``; offline, its model is a
``provider.Function`` that reads the question (with ``OPENAI_API_KEY`` set it is a real model).
"""

from __future__ import annotations

import os
import re
import sys

import anyio
import structlog

import loop
import provider
from cognitive import ReAct, new_turn_processor
from loop import Request, Role, TurnExecutor, tool
from session import Manager, MCPConduit, step_factory


@tool
async def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
async def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


TOOLS = [add, multiply]


def make_agent(step: TurnExecutor) -> ReAct:
    """The agent each question gets: ReAct over the tools."""
    return ReAct(step, max_turns=4)


def demo_model(request: Request) -> loop.Part | str:
    """Find two numbers and 'plus' or 'times' in the question, call the tool, then say the result."""
    question = next(t.text for t in request.turns if t.role is Role.USER)
    last = request.turns[-1]
    if last.role is Role.TOOL:
        return f"The answer is {float(last.tool_results[0].content):g}."
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", question)]
    operation = "multiply" if re.search(r"times|\*|multipl|product", question) else "add"
    if len(numbers) != 2:
        return "I can add or multiply two numbers: ask me something like 'what is 6 times 7?'"
    return provider.tool_call(operation, {"a": numbers[0], "b": numbers[1]})


def demo_provider() -> loop.Provider:
    """The offline model (what ``python -m session`` uses without ``--provider``)."""
    return provider.Function(demo_model)


async def main() -> None:
    if os.environ.get("OPENAI_API_KEY"):
        model: loop.Provider = provider.OpenAICompatible(os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))
    else:
        model = demo_provider()
    manager = Manager(new_turn_processor(make_agent), provider=model, make_step=step_factory(TOOLS))
    conduit = MCPConduit(name="calculator", tool="calculate",
                         description="Answer an arithmetic question (sums and products) in words.")
    async with manager:
        await conduit.serve(manager)  # until the client closes stdin


if __name__ == "__main__":
    # stdout carries the protocol: logs go to stderr.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    anyio.run(main)
