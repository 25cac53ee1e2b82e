"""Code action: the model writes one program that calls two tools; a sandbox runs it; its FINAL line answers.

Runs offline on a scripted model. Its first program asks for "pears" where the shop says "pear"; the tool's
error comes back as an exception in the program, the traceback goes back to the model, and its repaired
program loops over the items, calls both tools four times in one run and prints the total.

    python -m sandbox build-image                  # once: the sandbox image, built locally, no registry
    python examples/code_action.py                 # in a Docker sandbox
    python examples/code_action.py --unsafe-local  # no Docker: a plain subprocess, with NO isolation

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``), the same agent runs on that
real model instead.
"""

from __future__ import annotations

import os
import sys

import anyio

import provider
from cognitive import PatternKind
from cognitive import CodeAction
from loop import Request, Role, State, Step, Subscription, Text, TurnCompleted, tool
from sandbox import DockerSandbox, Sandbox, SandboxError, UnsafeLocalSandbox

QUESTION = "What would it cost to buy every apple and pear the shop has in stock?"
SHOP = {"apple": (0.5, 12), "pear": (0.8, 5)}  # unit price in euros, items in stock


@tool
def price(item: str) -> float:
    """The unit price of an item, in euros.

    Args:
        item: the item's name, singular (e.g. "apple").
    """
    return SHOP[item][0]


@tool
def stock(item: str) -> int:
    """How many of an item the shop has.

    Args:
        item: the item's name, singular (e.g. "apple").
    """
    return SHOP[item][1]


FIRST = """I'll compute it in one program.
```python
from tools import price, stock

total = sum(price(item=i) * stock(item=i) for i in ["apples", "pears"])
print(f"FINAL: Buying everything costs {total:.2f} euros.")
```"""

REPAIRED = """The shop uses singular names; here is the fixed program.
```python
from tools import price, stock

lines = []
total = 0.0
for item in ["apple", "pear"]:
    cost = price(item=item) * stock(item=item)
    lines.append(f"{stock(item=item)} {item}s cost {cost:.2f} euros")
    total += cost
print("; ".join(lines))
print(f"FINAL: Buying every apple and pear costs {total:.2f} euros.")
```"""


def demo_provider() -> provider.Function:
    """A scripted model that writes a buggy program, then repairs it from the traceback: for every question
    asked, so a served agent answers each message the same way."""
    def reply(request: Request) -> str:
        wrote = [turn.text for turn in request.turns if turn.role is Role.ASSISTANT]
        return REPAIRED if wrote and wrote[-1] == FIRST else FIRST

    return provider.Function(reply)


def configured_provider() -> object:
    """A real model when the environment names one, else the scripted demo model."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        model = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
        where = {"base_url": os.environ["OPENAI_BASE_URL"]} if os.environ.get("OPENAI_BASE_URL") else {}
        print(f"Running on {model}.\n")
        return provider.Retry(provider.OpenAICompatible(model, **where))
    print("Running on provider.Scripted (offline, no model needed).")
    return demo_provider()


def make_agent(step: Step, sandbox: Sandbox | None = None) -> CodeAction:
    """The agent: one program per reply over the two tools, up to 2 repairs, 20 tool calls per run; in a
    ``DockerSandbox`` unless another sandbox is given (as when served: ``python -m session serve
    examples.code_action:make_agent``)."""
    return CodeAction(step, sandbox if sandbox is not None else DockerSandbox(), tools=[price, stock],
                      max_tool_calls=20, max_repairs=2, timeout=30)


async def show(events: Subscription) -> None:
    """Print each program the model writes and what the sandbox said about it."""
    async for event in events:
        if not isinstance(event, TurnCompleted):
            continue
        kind = event.turn.kind
        if event.turn.role is Role.ASSISTANT and kind is None:
            print(f"\n[model]\n{event.turn.text}")
        elif kind is PatternKind.CODE_ACTION_ERROR:
            print(f"\n[sandbox]\n{event.turn.text}")


async def main(unsafe_local: bool) -> None:
    if unsafe_local:
        print("Sandbox: UnsafeLocalSandbox (a plain subprocess: NO isolation).")
        sandbox: Sandbox = UnsafeLocalSandbox()
    else:
        print("Sandbox: DockerSandbox (no network, read-only root, no capabilities, limits).")
        sandbox = DockerSandbox()
    step = Step(configured_provider())
    print(f"\nuser: {QUESTION}")
    failure: SandboxError | None = None
    async with anyio.create_task_group() as group:
        with step.events.subscribe() as events:
            group.start_soon(show, events)
            try:
                state = await make_agent(step, sandbox).run(State().append(Role.USER, Text(QUESTION)))
            except SandboxError as exc:  # leave the task group first: an exit raised in it would come out grouped
                failure = exc
    if failure is not None:
        raise SystemExit(f"\nthe sandbox cannot run: {failure}\n(or try --unsafe-local)")
    print(f"\nfinal answer: {state.answer}")
    print(f"code action: {state.outcome.data['CodeAction']}{' (degraded)' if state.degraded else ''}")


if __name__ == "__main__":
    anyio.run(main, "--unsafe-local" in sys.argv[1:])
