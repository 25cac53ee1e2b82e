"""An agent using a real MCP server: ``mcp-server-time`` (from PyPI) over stdio.

    pip install mcp-server-time
    python examples/mcp_tools.py

``MCPTools`` starts the server, lists its tools and hands them to the step like any other tools. The manager
runs inside the ``async with MCPTools(...)`` block, so the server lives as long as any turn may call it and
stops when the block ends.

Offline by default: the model is a ``provider.Function`` that, like a real model, reads the tool specs it is
sent and calls the one that takes a timezone. With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from
``OPENAI_MODEL``, default gpt-4o-mini), the same agent runs on that real model instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import anyio

import loop
import provider
from cognitive import new_turn_processor, react_factory
from loop import Request, Role, ToolFinished
from session import Manager, MCPStdioServer, MCPTools, step_factory

QUESTION = "What time is it in Tokyo right now?"
TIME_SERVER = MCPStdioServer(sys.executable, ["-m", "mcp_server_time", "--local-timezone", "UTC"], name="time")


def demo_model(request: Request) -> loop.Part | str:
    """Call the tool that takes a timezone, then answer from what it returned."""
    last = request.turns[-1]
    if last.role is Role.USER:
        clock = next(t for t in request.tools if set(t.parameters.get("required", ())) == {"timezone"})
        return provider.tool_call(clock.name, {"timezone": "Asia/Tokyo"})
    result = last.tool_results[0]
    if result.is_error:
        return f"The clock server failed: {result.content}"
    now = json.loads(result.content)
    return f"It is {now['datetime'][11:16]} on {now['day_of_week']} in Tokyo."


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the offline demo model."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        where = {"base_url": os.environ["OPENAI_BASE_URL"]} if os.environ.get("OPENAI_BASE_URL") else {}
        return provider.Retry(provider.OpenAICompatible(os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), **where))
    print("Running on provider.Function (offline, no model needed).")
    return provider.Function(demo_model)


async def main() -> None:
    model = configured_provider()
    async with MCPTools(TIME_SERVER, timeout=30) as tools:
        print(f"tools from the MCP server: {', '.join(t.spec.name for t in tools)}")
        manager = Manager(new_turn_processor(react_factory), provider=model, make_step=step_factory(tools))
        async with manager:
            session = await manager.open()
            print(f"user: {QUESTION}")
            with session.events.subscribe() as events:
                state = await session.ask(QUESTION)
                for event in events.drain():
                    if isinstance(event, ToolFinished):
                        print(f"  [tool] {event.call.name}({event.call.arguments}) -> {event.result.content!r}")
    print(f"agent: {state.answer}")


if __name__ == "__main__":
    if importlib.util.find_spec("mcp_server_time") is None:
        sys.exit("This example needs the MCP time server: pip install mcp-server-time")
    anyio.run(main)
