"""(m) What a tool costs when it is served over MCP stdio, against the same function called as a ``@tool``.

The server is this file run as ``python -m tests.benchmarks.bench_mcp --serve``: the SDK's ``MCPServer`` with
one tool, ``shout``, the very function the baseline wraps with ``@tool``. Both are called through the same
``Tool.call`` seam, in batches, timed interleaved (see ``_harness``):

- per call: ``await tool.call({"text": ...})`` (JSON-RPC over pipes to a child process, and back);
- per turn: one ``Step.turn`` whose model (a ``provider.Function``) calls the tool once, so the figure is what
  an agent's turn pays, streaming, schema check and events included.

Informational (no target): the MCP figure is dominated by the round trip through the server process, which
this framework does not control; the overhead is ``value - baseline``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio

import provider
from loop import Role, State, Step, Text, tool
from session.mcp import MCPStdioServer, MCPTools
from tests.benchmarks._harness import Figure, interleave_async

ROOT = Path(__file__).resolve().parents[2]
ARGUMENTS = {"text": "quiet please"}


async def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper()


def serve() -> None:
    """Serve ``shout`` over MCP stdio (what the benchmark's child process runs)."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bench", log_level="WARNING")
    server.add_tool(shout)
    anyio.run(server.run_stdio_async)


def _turn_step(t: Any) -> Step:
    def reply(request: Any) -> Any:
        return provider.tool_call(t.spec.name, ARGUMENTS)

    return Step(provider.Function(reply), tools=[t])


async def _measure(calls: int, warmup: int, repeats: int) -> dict[str, float]:
    direct = tool(shout)
    server = MCPStdioServer(sys.executable, ["-m", "tests.benchmarks.bench_mcp", "--serve"], cwd=str(ROOT),
                            name="bench")
    async with MCPTools(server) as tools:
        remote = tools["bench_shout"]
        assert await remote.call(ARGUMENTS) == await direct.call(ARGUMENTS) == "QUIET PLEASE"
        state = State().append(Role.USER, Text("Shout."))
        remote_step, direct_step = _turn_step(remote), _turn_step(direct)
        done = await remote_step.turn(state)
        assert done.last is not None and done.last.tool_results[0].content == "QUIET PLEASE", done.last

        async def calls_of(t: Any) -> None:
            for _ in range(calls):
                await t.call(ARGUMENTS)

        async def turns_of(step: Step) -> None:
            for _ in range(calls):
                await step.turn(state)

        return await interleave_async({
            "mcp call": lambda: calls_of(remote), "direct call": lambda: calls_of(direct),
            "mcp turn": lambda: turns_of(remote_step), "direct turn": lambda: turns_of(direct_step),
        }, warmup=warmup, repeats=repeats)


def run(quick: bool = False) -> list[Figure]:
    """Measure (m); ``quick`` uses a few calls and one sample (for the smoke test)."""
    calls, warmup, repeats = (5, 0, 1) if quick else (200, 1, 5)
    t = anyio.run(_measure, calls, warmup, repeats, backend="asyncio")
    per = {name: seconds / calls * 1e6 for name, seconds in t.items()}
    note = f"{calls} calls per batch, median of {repeats} batches; the server is a child process on pipes"
    return [
        Figure("(m) mcp", "MCP tool call over stdio", per["mcp call"], "µs", per["direct call"],
               "the same function as a @tool", notes=(note,)),
        Figure("(m) mcp", "Step turn calling the MCP tool", per["mcp turn"], "µs", per["direct turn"],
               "turn calling the @tool", notes=(f"overhead per turn: {per['mcp turn'] - per['direct turn']:.0f} µs",)),
    ]


if __name__ == "__main__":
    if "--serve" in sys.argv:
        serve()
    else:
        from tests.benchmarks._harness import render_table

        print(render_table(run(quick="--quick" in sys.argv)))
