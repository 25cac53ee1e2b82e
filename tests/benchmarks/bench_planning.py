"""(p) Planning up front: ReAct's prompt tokens over ReWOO's on multi-hop lookups at 3, 5 and 8 hops.

The figures come from ``examples/rewoo_vs_react.py`` (one run of its ``compare``): an archive agent with a
seven-tool box answers "who is N generations of mentors back from Ada Reyes?" on a deterministic simulated model
that bills each request its turns (``loop.approx_tokens``), the tool specifications offered and the native output
schema (compact JSON, four characters a token). ReAct re-sends system prompt, tools and transcript every hop;
ReWOO pays for them once in its planner (the tools as signature lines, the plan's schema natively and only
there), then once more for the system prompt in its solver. Target: ReAct pays at least 3x ReWOO's prompt tokens
at 3 hops, and the gap widens with every hop count after.
"""

from __future__ import annotations

import anyio

from examples.rewoo_vs_react import Cost, compare, ratios
from tests.benchmarks._harness import Figure

HOPS = (3, 5, 8)
TARGET = 3.0


def _figures(costs: list[Cost]) -> list[Figure]:
    by = {(c.pattern, c.hops): c for c in costs}
    found = ratios(costs)
    figures = []
    for index, hops in enumerate(HOPS):
        react, rewoo = by["ReAct", hops], by["ReWOO", hops]
        if index == 0:
            low, target = TARGET, f"ratio >= {TARGET:g}x"
        else:
            before = HOPS[index - 1]
            low, target = found[before], f"ratio >= {found[before]:.2f}x ({before} hops)"
        notes = [(f"model calls at {hops} hops: ReAct {react.calls}, ReWOO {rewoo.calls}; answers agree: "
                  f"{react.answer == rewoo.answer}"),
                 (f"ReAct: {react.billed.turns} turn + {react.billed.tools} tool-spec tokens; ReWOO: "
                  f"{rewoo.billed.turns} turn + {rewoo.billed.schema} output-schema tokens")]
        if index == 0:
            notes.append("deterministic: the same figures on every run; tokens are approx_tokens estimates")
        figures.append(Figure(
            "(p) planning", f"ReAct prompt tokens, {hops}-hop lookup", float(react.prompt_tokens), "tokens",
            float(rewoo.prompt_tokens), "ReWOO", low=low, on_ratio=True, target_text=target, notes=tuple(notes),
        ))
    return figures


def run(quick: bool = False) -> list[Figure]:
    """Measure (p). The simulation is deterministic and takes under a second, so ``quick`` changes nothing."""
    return _figures(anyio.run(compare, HOPS, backend="asyncio"))


if __name__ == "__main__":
    import sys

    from tests.benchmarks._harness import render_table

    print(render_table(run(quick="--quick" in sys.argv)))
