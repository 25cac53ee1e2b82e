"""The agent the scale-out benchmark serves: ``python -m session serve tests.benchmarks.scale_out_agent:make_agent``.

A ``ReAct`` agent over an offline model that answers at once (no tool call, no wait), so that what the benchmark
times is the serving: HTTP, the store, the leases and the event feed. Each answer names the message it answers
(``answer to <text>``), so the benchmark can check that every answer it reads belongs to the message it posted.
"""

from cognitive import ReAct
from loop import Request, Role, TurnExecutor
from provider import Function


def make_agent(executor: TurnExecutor) -> ReAct:
    return ReAct(executor)


def reply(request: Request) -> str:
    asked = next(t for t in reversed(request.turns) if t.role is Role.USER)
    return f"answer to {asked.text}"


def demo_provider() -> Function:
    return Function(reply)
