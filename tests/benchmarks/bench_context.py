"""Context views: how many prompt tokens a long tool chain costs under each view.

The chain: a model (``provider.Function``) that reads page after page, calling ``read`` once a turn for
``STEPS`` turns and then answering. Each page is about ``PAGE_CHARS`` characters (a section of a document or a
fetched web page: the results long tool loops mostly carry). The model finds the next page number in the last
result it is shown, so every view must keep the results the model is reacting to. The prompt of every request
is counted with ``loop.approx_tokens`` over the turns as the provider receives them (tool specs not counted).

(a) total prompt tokens over the chain for the full history, ``SlidingWindow(2)``, ``Ledger()`` and
    ``AutoContext()`` (all with default settings). Target: the full history costs >= 5x the ledger.
(b) per-turn growth of the ledger view: the last request's prompt against the first request holding a tool
    result. Target: flat, <= 1.5x. And over the second half of the chain (last request against the middle
    one), once the ledger's list of facts has reached its cap. Target: <= 1.1x. For contrast, the first
    figure for a ledger with a smaller list of facts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import anyio

import provider
from cognitive import ReAct
from cognitive.context._ledger import AutoContext, Ledger
from cognitive.context._window import SlidingWindow
from loop import Request, Role, State, Step, Text, Transform, approx_tokens, tool
from tests.benchmarks._harness import Figure

STEPS = 30
PAGE_CHARS = 3_000
RATIO_TARGET = 5.0
SECOND_HALF_TARGET = 1.1
TIGHT = "Ledger(max_result_chars=120, max_chars=1_500)"
_PAGE = re.compile(r"^page (\d+) of")
_FILLER = ("The committee met again in the spring and reviewed the figures that the regional offices had sent in. "
           "Most of the numbers agreed with the previous quarter, with small differences in transport costs. ")


@tool
async def read(page: int) -> str:
    """Read one page of the report."""
    body = (_FILLER * (PAGE_CHARS // len(_FILLER) + 1))[:PAGE_CHARS]
    return f"page {page} of the report; the next page is {page + 1}.\n{body}"


def _model(steps: int, prompts: list[int]) -> provider.Function:
    def reply(request: Request) -> object:
        prompts.append(approx_tokens(request.turns))
        last = next((r for t in reversed(request.turns) for r in t.tool_results), None)
        read_so_far = int(_PAGE.match(last.content).group(1)) if last is not None and _PAGE.match(last.content) else 0
        if read_so_far >= steps:
            return f"I read all {steps} pages."
        return provider.tool_call("read", {"page": read_so_far + 1})

    return provider.Function(reply)


async def _chain(steps: int, transforms: Sequence[Transform]) -> list[int]:
    prompts: list[int] = []
    step = Step(_model(steps, prompts), tools=[read], transforms=transforms)
    start = State().append(Role.SYSTEM, Text("You answer questions about reports using the read tool."))
    state = await ReAct(step, max_turns=steps + 5).run(start.append(Role.USER, Text("Read the whole report.")))
    results = sum(len(t.tool_results) for t in state)
    assert state.answer == f"I read all {steps} pages." and results == steps, (state.answer, results)
    assert len(prompts) == steps + 1
    return prompts


async def _measure(steps: int) -> dict[str, list[int]]:
    views: dict[str, Sequence[Transform]] = {
        "full": [], "SlidingWindow(2)": [SlidingWindow(2)], "Ledger()": [Ledger()], "AutoContext()": [AutoContext()],
        TIGHT: [Ledger(max_result_chars=120, max_chars=1_500)],
    }
    return {name: await _chain(steps, transforms) for name, transforms in views.items()}


def run(quick: bool = False) -> list[Figure]:
    """Measure (a) and (b); ``quick`` runs a short chain (for the smoke test)."""
    steps = 8 if quick else STEPS
    prompts = anyio.run(_measure, steps, backend="asyncio")
    full = float(sum(prompts["full"]))
    chain = f"a {steps}-step read chain, pages of {PAGE_CHARS:,} characters, prompts counted with approx_tokens"
    figures = [
        Figure(
            "(a) context", "prompt tokens in all, full history", full, "tokens", float(sum(prompts["Ledger()"])),
            "Ledger()", low=RATIO_TARGET, on_ratio=True, target_text=f"full/ledger >= {RATIO_TARGET:g}x",
            notes=(f"{chain}; Ledger() defaults: results excerpted to 400 characters, facts capped at 6,000",),
        ),
    ]
    for name in ("SlidingWindow(2)", "AutoContext()"):
        figures.append(Figure("(a) context", f"prompt tokens in all, {name}", float(sum(prompts[name])), "tokens",
                              full, "full history", notes=(chain,)))
    ledger = prompts["Ledger()"]
    middle = len(ledger) // 2
    figures += [
        Figure(
            "(b) ledger growth", "last prompt / first prompt with a result", float(ledger[-1]), "tokens",
            float(ledger[1]), "first prompt with a result",
            notes=(f"Ledger() prompts per request: {', '.join(map(str, ledger))}",),
        ),
        Figure(
            "(b) ledger growth", "last prompt / middle prompt (second half)", float(ledger[-1]), "tokens",
            float(ledger[middle]), f"prompt {middle + 1}", high=SECOND_HALF_TARGET, on_ratio=True,
            target_text=f"<= {SECOND_HALF_TARGET:g}x",
            notes=("once the list of facts reaches its cap the ledger prompt stops growing",),
        ),
        Figure(
            "(b) ledger growth", "full history for contrast: last prompt / middle prompt",
            float(prompts["full"][-1]), "tokens", float(prompts["full"][middle]), f"prompt {middle + 1}",
            notes=("the transcript keeps growing with every call; the ledger's is flat once full",),
        ),
        Figure(
            "(b) ledger growth", "last / first prompt with a result, tighter ledger", float(prompts[TIGHT][-1]),
            "tokens", float(prompts[TIGHT][1]), "first prompt with a result",
            notes=(f"{TIGHT}: what a smaller list of facts costs per turn, for contrast with the defaults",),
        ),
    ]
    return figures


if __name__ == "__main__":
    from tests.benchmarks._harness import render_table

    print(render_table(run(quick=__import__("sys").argv[-1] == "--quick")))
