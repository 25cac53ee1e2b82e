"""A managed agent on a budget: a long chain of lookups, a prompt that stops growing, and an answer even when
the budget runs out.

``Managed(step)`` is a ReAct tool loop whose model sees the task, the latest tool exchange, and one list of the
facts earlier calls found (``Ledger``), instead of the whole transcript: here the list keeps the newest facts
that fit in 1,500 characters, so the prompt stops growing after a few lookups. ``WithBudget(..., Budget(...))``
caps the model and tool calls; when the cap is reached the agent still writes an answer from what it found,
marked ``degraded`` with the reason, and the spend is in the outcome data either way.

Runs offline on a small demo model by default: a ``provider.Function`` that walks an org chart one employee
record at a time (nine lookups from Dana to the top). A ``PromptMeter`` notes how big each prompt sent was.

    python examples/managed_budget.py

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``, default gpt-4o-mini), or
``ANTHROPIC_API_KEY`` (model from ``ANTHROPIC_MODEL``), the same agent runs on that real model instead.
"""

from __future__ import annotations

import json
import re

import anyio

import loop
import provider
from cognitive import Ledger, Managed, WithBudget
from loop import Budget, Request, Role, State, Step, Text, tool

QUESTION = "Who is at the top of Dana's reporting chain? Follow it one manager at a time with the lookup tool."
CHAIN = ["Dana", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jon", "Kim", "Lee"]  # each reports to the next


@tool
async def lookup_employee(name: str) -> str:
    """The employee record of the person called name, as JSON; reports_to names their manager."""
    if name not in CHAIN:
        raise LookupError(f"no employee is called {name!r}")
    at = CHAIN.index(name)
    manager = CHAIN[at + 1] if at + 1 < len(CHAIN) else None
    history = [f"{year}: annual review filed; worked on the {['Atlas', 'Borealis', 'Cygnus'][year % 3]} project"
               for year in range(2004, 2024)]  # a real record holds much the model does not need
    return json.dumps({"name": name, "reports_to": manager, "title": "chief executive" if manager is None else
                       f"manager, grade {at + 1}", "office": ["Leeds", "Lisbon", "Lyon"][at % 3], "history": history})


def demo_model(request: Request) -> list:
    """A stand-in for a model walking the chain: it reads every record it can see (in the ledger or the latest
    exchange), looks up the first manager whose record it has not seen, and answers at the top."""
    text = "\n".join([t.text for t in request.turns] + [r.content for t in request.turns for r in t.tool_results])
    managers = dict(re.findall(r'"name": "(\w+)", "reports_to": "?(\w+)"?', text))  # null: the top
    usage = loop.Usage(loop.approx_tokens(request.turns), 20)
    top = next((name for name, manager in managers.items() if manager == "null"), None)
    if top:
        return [f"The top of Dana's reporting chain is {top}, the chief executive.", usage]
    frontier = next((m for m in managers.values() if m not in managers), "Dana")
    if request.options.tool_choice == "none":  # the budget ran out: answer from what was found
        return [f"I followed the chain up to {frontier}, but the budget ran out before I could look further.", usage]
    return [provider.tool_call("lookup_employee", {"name": frontier}), usage]


class PromptMeter:
    """A provider wrapper that notes the size of every prompt it passes on, in approximate tokens."""

    def __init__(self, inner: loop.Provider) -> None:
        self.inner = inner
        self.sizes: list[int] = []

    def stream(self, request: Request) -> loop.DeltaStream:
        self.sizes.append(loop.approx_tokens(request.turns))
        return self.inner.stream(request)


TOOLS = [lookup_employee]  # what `python -m session serve examples.managed_budget:make_agent` gives the step
BUDGET = Budget(max_turns=15, max_tool_calls=12, name="walk")


def demo_provider() -> provider.Function:
    return provider.Function(demo_model)


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the offline demo model."""
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    return chosen


def make_agent(step: Step, budget: Budget = BUDGET) -> WithBudget:
    """The managed tool loop, with a ledger of at most 1,500 characters, inside ``budget``."""
    return WithBudget(Managed(step, view=Ledger(max_chars=1_500)), budget)


async def main() -> None:
    meter = PromptMeter(configured_provider())
    step = Step(meter, tools=TOOLS)
    asked = State().append(Role.USER, Text(QUESTION))
    print(f"user: {QUESTION}")

    state = await make_agent(step).run(asked)
    print(f"answer: {state.answer}  ({state.outcome.status})")
    print(f"spent: {state.outcome.data['WithBudget']['spent']}")
    print(f"prompt sent per model call (tokens): {meter.sizes}")
    transcript = [loop.approx_tokens(state.turns[:i]) for i, t in enumerate(state) if t.role is Role.ASSISTANT]
    print(f"whole transcript at each call (tokens): {transcript}")

    tight = await make_agent(step, Budget(max_turns=15, max_tool_calls=4, name="walk")).run(asked)
    print(f"\nwith max_tool_calls=4: {tight.answer}  ({tight.outcome.status})")
    print(f"reason: {tight.outcome.reason}")
    print(f"spent: {tight.outcome.data['WithBudget']['spent']}")


if __name__ == "__main__":
    anyio.run(main)
