"""Approvals: a refund desk whose agent looks orders up on its own, but asks a person before it refunds more than
50 — and knows who is asking.

``@tool(needs_approval=over_limit)`` gates the refund tool by a policy of the caller and the arguments: small
refunds, and any refund a caller with the ``refunds`` role asks for, run at once; a larger one stops the run with
the call left open (the outcome ``pending``). A person answers it — ``loop.answer_approvals`` in a script;
``Session.approve`` in an application; the terminal's y/N prompt under ``python -m session chat``; ``POST
/sessions/{id}/approvals`` under ``python -m session serve``, also after the server restarted — and the run goes on
from the tool's result, or from the denial ("the user denied this call"). The tools read the caller and the
application's dependencies (the ledger, from ``make_deps``) through a ``loop.RunContext`` parameter the model
never sees.

Runs offline on a small demo model by default: a ``provider.Function`` that looks the order up, refunds it in
full, and reports what happened.

    python examples/approvals.py
    python -m session chat examples.approvals:make_agent
    python -m session serve examples.approvals:make_agent --store sqlite:///refunds.db

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``, default gpt-4o-mini), or
``ANTHROPIC_API_KEY`` (model from ``ANTHROPIC_MODEL``), the same agent runs on that real model instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import anyio

import loop
import provider
from cognitive import ReAct
from loop import (Caller, Decision, Request, Role, RunContext, State, Step, Text, TurnExecutor, answer_approvals,
                  awaiting_approval, run_context, tool)

ORDERS = {"42": {"item": "rain jacket", "paid": 120}, "7": {"item": "socks", "paid": 12}}
LIMIT = 50


def make_deps() -> dict[str, Any]:
    """The application's dependencies, given to every run (``python -m session serve`` calls this once)."""
    return {"ledger": []}


def over_limit(context: RunContext[Any], name: str, arguments: Mapping[str, Any]) -> bool:
    """A refund over the limit needs a person's approval, unless the caller may refund anything."""
    caller = context.caller
    allowed = caller is not None and "refunds" in caller.claims.get("roles", ())
    return arguments["amount"] > LIMIT and not allowed


@tool
async def look_up_order(order_id: str) -> str:
    """What an order holds and what was paid for it."""
    order = ORDERS.get(order_id)
    return json.dumps(order) if order else f"no order {order_id}"


@tool(needs_approval=over_limit)
async def refund(order_id: str, amount: int, context: RunContext[dict[str, Any]]) -> str:
    """Refund an amount of an order to the customer."""
    who = "nobody" if context.caller is None else context.caller.id
    if context.deps is not None:
        context.deps["ledger"].append((order_id, amount, who))
    return f"refunded {amount} on order {order_id} (asked by {who})"


TOOLS = [look_up_order, refund]  # what `python -m session serve examples.approvals:make_agent` gives the step


def demo_model(request: Request) -> provider.Reply:
    """A stand-in for a model: look the order up, refund what was paid, then say how it went."""
    asked = max(i for i, t in enumerate(request.turns) if t.role is Role.USER)
    since = request.turns[asked:]
    numbers = re.findall(r"\d+", since[0].text)
    if not numbers:
        return (f"I look orders up and refund them; a refund over {LIMIT} waits for a person's approval. "
                "Which order shall I refund?")
    order = numbers[0]
    results = [r for t in since for r in t.tool_results]
    if not results:
        return [provider.tool_call("look_up_order", {"order_id": order})]
    last = results[-1]
    if last.name == "look_up_order":
        paid = json.loads(last.content)["paid"] if last.content.startswith("{") else 0
        return [provider.tool_call("refund", {"order_id": order, "amount": paid})]
    if last.is_error:
        return f"I could not refund order {order}: {last.content.removeprefix('error: ')}."
    return f"Done: {last.content}."


def demo_provider() -> provider.Function:
    return provider.Function(demo_model)


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the offline demo model."""
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    return chosen


def make_agent(step: TurnExecutor) -> ReAct:
    """ReAct over the refund desk's tools; the gate is the tool's own, so any pattern keeps it."""
    return ReAct(step)


async def main() -> None:
    step = Step(configured_provider(), tools=TOOLS)
    agent = make_agent(step)
    deps = make_deps()
    with run_context(caller=Caller("ada", "shop"), deps=deps):  # ada asks
        small = await agent.run(State().append(Role.USER, Text("Please refund order 7.")))
        print(f"order 7: {small.answer}")
        waiting = await agent.run(State().append(Role.USER, Text("Please refund order 42.")))
        (call,) = awaiting_approval(waiting)
        print(f"order 42 waits for approval: {call.name}({call.arguments})")
        # grace approves; the refund still runs for ada, who asked, and the decision records grace
        answered = await answer_approvals(step, waiting, [Decision.approve(call.id)], by=Caller("grace", "shop"))
        print(f"decided: {answered[-1].meta['approvals']}")
        done = await agent.run(answered)
    print(f"order 42: {done.answer}")
    print(f"ledger: {deps['ledger']}")


if __name__ == "__main__":
    anyio.run(main)
