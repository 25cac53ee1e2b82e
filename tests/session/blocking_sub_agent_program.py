"""A program the kill test runs and kills: ``python -m tests.session.blocking_sub_agent_program DB``.

It serves session ``killed`` from ``SQLiteStore(DB)`` and sends it two messages. The first is answered. The
second makes the model call ``delegate``, whose sub-agent (a ``Step`` sharing the session's provider) calls
``block``: that tool prints ``MARKER`` and waits forever, for the test to kill the process with SIGKILL.
"""

from __future__ import annotations

import sys

import anyio

from cognitive import ReAct, new_turn_processor, react_factory
from loop import Request, Role, State, Step, Text, tool
from provider import Function, tool_call
from session import Manager, SQLiteStore, step_factory

MARKER = "SUB-AGENT BLOCKED"
SESSION = "killed"
QUESTION = "what is left to do?"


def reply(request: Request) -> object:
    """The model of the main line and of the sub-agent: 'second' delegates, the sub-agent's question blocks,
    a tool result is summed up, anything else is echoed upper-cased."""
    last = request.turns[-1]
    if last.role is Role.USER and last.text == "second":
        return tool_call("delegate", {"question": QUESTION})
    if last.role is Role.USER and last.text == QUESTION:
        return tool_call("block", {})
    if last.role is Role.TOOL:
        return f"tool said: {last.tool_results[0].content}"
    return last.text.upper()


PROVIDER = Function(reply)


@tool
async def block() -> str:
    """Tells the test the sub-agent is running, then never finishes."""
    print(MARKER, flush=True)
    await anyio.sleep_forever()
    return "unreachable"


SUB_STEP = Step(PROVIDER, tools=[block])


@tool
async def delegate(question: str) -> str:
    """Ask a sub-agent."""
    return (await ReAct(SUB_STEP).run(State().append(Role.USER, Text(question)))).answer or ""


def make_manager(store: SQLiteStore) -> Manager:
    return Manager(new_turn_processor(react_factory), provider=PROVIDER, store=store,
                   make_step=step_factory([delegate]))


async def main(path: str) -> None:
    store = SQLiteStore(path)
    async with make_manager(store) as manager:
        session = await manager.open(SESSION)
        await session.ask("first")
        print("first answered", flush=True)
        await session.ask("second")  # never returns: the process is killed while its sub-agent blocks


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
