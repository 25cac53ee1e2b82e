"""Research: search with the tools, check every finding against its source, then write the answer.

The question needs two facts: the capital of Australia, and how many people live there. The first search looks the
capital up but gives the population from memory; the check (a typed ``SourceCheck``: every claim backed by a tool
result, nothing contradicting the sources, the question covered) fails it for the unbacked figure, so the run
searches again with that issue, looks the population up, and passes its second check. The answer is written from
the notes of the work; the searches and checks themselves never enter the conversation. The program prints each
check and the answer.

Runs offline on a small demo model by default: a ``provider.Function`` that searches when offered tools, checks
findings against the tool results when asked for a ``SourceCheck``, and answers from the notes otherwise.

    python examples/research.py
    python -m session serve examples.research:make_agent

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``), or ``ANTHROPIC_API_KEY``, it runs
on that real model.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio

import loop
import provider
from cognitive import Research
from loop import Request, Role, State, Step, Text, tool

QUESTION = "How many people live in the capital of Australia?"
ARCHIVE = {
    "capital of australia": "Canberra is the capital of Australia (since 1913).",
    "population of canberra": "Canberra had 467,000 inhabitants at the 2021 census.",
}


@tool
async def search(query: str) -> str:
    """Search the reference archive; give a short query such as "capital of France"."""
    return ARCHIVE.get(query.strip().lower().rstrip("?"), f"The archive has no entry for {query!r}.")


TOOLS = [search]  # what `python -m session serve examples.research:make_agent` gives the step


def _found(request: Request) -> list[str]:
    return [r.content for t in request.turns for r in t.tool_results]


def _search(request: Request) -> Any:
    """The searcher: look up what is missing, then summarise the findings with their sources."""
    question = next(t.text for t in reversed(request.turns) if t.role is Role.USER)
    found = _found(request)
    if "australia" not in question.lower():
        if request.turns[-1].role is Role.SYSTEM:
            return provider.tool_call("search", {"query": question})
        return f"Findings: nothing on this in the archive ({found[-1] if found else 'no search made'})."
    if not found:
        return provider.tool_call("search", {"query": "capital of Australia"})
    if "check of your findings" in request.turns[-1].text and not any("census" in f for f in found):
        return provider.tool_call("search", {"query": "population of Canberra"})
    census = next((f for f in found if "census" in f), None)
    if census is None:  # the first search gives the figure from memory: the check will catch it
        return "Findings: Canberra is the capital of Australia (archive: capital of Australia); about 460,000 live there."
    return ("Findings: Canberra is the capital of Australia (archive: capital of Australia); it had 467,000 "
            "inhabitants at the 2021 census (archive: population of Canberra).")


def _check(request: Request) -> str:
    """The check: a figure in the findings must appear in a tool result."""
    findings = next((t.text for t in reversed(request.turns) if t.role is Role.ASSISTANT and t.text.startswith(
        "Findings")), "")
    sources = " ".join(_found(request))
    unbacked = [n for n in re.findall(r"\d[\d,]*\d", findings) if n not in sources]
    issues = [f"The figure {n} is not backed by any tool result: look it up." for n in unbacked]
    return json.dumps({"backed": not unbacked, "consistent": True, "covered": True, "issues": issues})


def demo_model(request: Request) -> Any:
    properties = (request.options.output_schema or {}).get("properties", {})
    if "backed" in properties:
        return _check(request)
    if request.tools:
        return _search(request)
    notes = next((t.text for t in reversed(request.turns) if t.kind == "work_notes"), "")
    if "467,000" in notes:
        return "About 467,000 people live in Canberra, the capital of Australia (2021 census)."
    if "Australia" in notes:
        return "Canberra is the capital of Australia; its population could not be confirmed."
    return ("I research questions in the reference archive, check every finding against its source, and answer "
            "from what holds up. Try: how many people live in the capital of Australia?")


def demo_provider() -> provider.Function:
    return provider.Function(demo_model)


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the offline demo model."""
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    return chosen


def make_agent(step: Step) -> Research:
    """Search, then at most two checks (a failed one searches again), then the answer."""
    return Research(step, max_verify_rounds=2)


def report(state: State) -> list[str]:
    """Each check the run made, then the answer."""
    outcome = state.outcome
    research = outcome.data["Research"] if outcome is not None else {}
    lines = []
    for check in research.get("checks", []):
        if "error" in check:
            lines.append(f"  check {check['round']}: no valid answer")
        else:
            verdict = "passed" if check["passed"] else "failed: " + "; ".join(check["issues"])
            lines.append(f"  check {check['round']}: {verdict}")
    lines.append(f"  searches: {research.get('rounds')}"
                 + (f" (degraded: {outcome.reason})" if outcome is not None and not outcome.ok else ""))
    lines.append(f"  answer: {state.answer}")
    return lines


async def main() -> None:
    agent = make_agent(Step(configured_provider(), tools=TOOLS))
    state = await agent.run(State().append(Role.USER, Text(QUESTION)))
    print(f"user: {QUESTION}")
    print("\n".join(report(state)))


if __name__ == "__main__":
    anyio.run(main)
