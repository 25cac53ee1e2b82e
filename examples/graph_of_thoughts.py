"""A graph of thoughts sorts a list by sorting its parts, then merging them: several parents make one thought.

``GraphOfThoughts`` runs the operations declared below in order. ``Generate(4)`` proposes four thoughts from the
question: the demo model sorts each third of the list, and also tries the whole list at a glance (and slips).
``Score()`` rates each thought with a plain function, no model call: the share of the numbers it lists, in
order, that come from the question (0 when a thought is out of order or names a number the question lacks).
``KeepBest(3)`` drops the hasty try. ``Aggregate(1)`` merges the three sorted parts into one thought whose
parents are all three; its state shows the lines it merged. The demo model's merge loses a repeated number, so
its score is below 1; ``Refine(1)`` checks it against the question and puts the number back, as a child of the
merged thought; the last ``Score()`` rates that 1. The answer is written from the best thought, and the
outcome data holds the graph: each node's parents and score, and the chosen thought's provenance.

Runs offline on a deterministic demo model (``provider.Function``) by default:

    python examples/graph_of_thoughts.py

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``, default gpt-4o-mini), or
``ANTHROPIC_API_KEY`` (model from ``ANTHROPIC_MODEL``), the same graph runs on that real model. It is servable:
``python -m session serve examples.graph_of_thoughts:make_agent``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence

import anyio

import loop
import provider
from cognitive import Aggregate, Generate, GraphOfThoughts, KeepBest, Refine, Score
from loop import Request, Role, State, Step, Text

QUESTION = "Sort these numbers from smallest to largest: 42 7 19 3 88 23 7 61 15 30 54 9"
OPERATIONS = [Generate(4), Score(), KeepBest(3), Aggregate(1), Score(), Refine(1), Score()]
TOOLS: list[loop.Tool] = []  # what `python -m session serve examples.graph_of_thoughts:make_agent` gives the step


def numbers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"-?\d+", text)]


def listed(thought: str) -> list[int]:
    """The numbers a thought lists: those after its last colon (``Part 1 sorted: 3 7 19 42``)."""
    return numbers(thought.rsplit(":", 1)[-1])


def question_of(turns: Sequence[loop.Turn]) -> str:
    """The latest request."""
    return next((t.text for t in reversed(turns) if t.role is Role.USER), "")


def sorted_share(state: State) -> float:
    """The scorer: the share of the question's numbers the thought lists in order; 0 when they are out of order
    or include a number the question does not have."""
    wanted = Counter(numbers(question_of(state.turns)))
    found = listed(state.last.text if state.last is not None else "")
    if not wanted or not found or found != sorted(found) or Counter(found) - wanted:
        return 0.0
    return len(found) / sum(wanted.values())


def thoughts(*texts: str) -> str:
    return json.dumps({"thoughts": [{"text": text, "final": False} for text in texts]})


def demo_model(request: Request) -> str:
    """A stand-in model: sorts each third of the list (and the whole, sloppily), merges sorted parts but drops
    a repeated number, puts missing numbers back when asked to improve, and answers from the chosen line."""
    question = numbers(question_of(request.turns))
    schema = request.options.output_schema or {}
    if "thoughts" in schema.get("properties", {}):
        asking = request.turns[-2].text
        line = [t.text for t in request.turns if t.kind == "thought"]
        if asking.startswith("Merge"):
            merged = sorted({n for text in re.findall(r"^- (.*)$", request.turns[-3].text, re.MULTILINE)
                             for n in listed(text)})  # a set: the slip that loses a repeated number
            return thoughts("Merged the sorted parts: " + " ".join(map(str, merged)))
        if asking.startswith("Improve") and line:
            have = listed(line[-1])
            missing = Counter(question) - Counter(have)
            if not missing:
                return thoughts(line[-1])
            fixed = sorted(have + list(missing.elements()))
            return thoughts(f"Put back {', '.join(map(str, missing.elements()))}: " + " ".join(map(str, fixed)))
        if not question:
            return thoughts("There is no list to sort yet: ask for the numbers to sort.")
        thirds = [question[i:i + 4] for i in range(0, len(question), 4)]
        parts = [f"Part {i} sorted: " + " ".join(map(str, sorted(part))) for i, part in enumerate(thirds, 1)]
        hasty = sorted(set(question))
        hasty[-1], hasty[-2] = hasty[-2], hasty[-1]
        return thoughts(*parts, "All at once: " + " ".join(map(str, hasty)))
    if "score" in schema.get("properties", {}):  # a model scorer (not this example's) would be asked this
        line = [t.text for t in request.turns if t.kind == "thought"]
        return json.dumps({"score": 0.5, "reason": line[-1] if line else "no thought"})
    steps = re.findall(r"^\d+\. (.*)$", request.turns[-1].text, re.MULTILINE)
    if not steps or not listed(steps[-1]):
        return "Give me a list of numbers and I will sort it by sorting its parts and merging them."
    return "In order: " + ", ".join(map(str, listed(steps[-1]))) + "."


def demo_provider() -> provider.Function:
    return provider.Function(demo_model)


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the offline demo model."""
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    return chosen


def make_agent(step: Step) -> GraphOfThoughts:
    """Sort the parts, keep the three best, merge them, score, refine, score again."""
    return GraphOfThoughts(step, operations=OPERATIONS, scorer=sorted_share)


async def main() -> None:
    agent = make_agent(Step(configured_provider(), tools=TOOLS))
    state = await agent.run(State().append(Role.USER, Text(QUESTION)))
    graph = state.outcome.data["GraphOfThoughts"] if state.outcome is not None else {}
    pruned = {i for op in graph.get("operations", []) for i in op.get("pruned", [])}
    print(f"question: {QUESTION}")
    print("operations: " + " -> ".join(op["operation"] for op in graph.get("operations", [])))
    print("graph (node <- parents: score, thought):")
    for node in graph.get("nodes", []):
        score = "  -  " if node["score"] is None else f"{node['score']:.2f}"
        parents = ",".join(map(str, node["parents"]))
        note = "  (pruned)" if node["id"] in pruned else f"  (failed: {node['failed']})" if "failed" in node else ""
        print(f"  #{node['id']} <- {parents:<6} {score}  {node['thought']}{note}")
    if graph.get("best") is not None:
        built = ", ".join(f"#{i}" for i in graph["provenance"]) or "the question alone"
        print(f"chosen: #{graph['best']} (score {graph['score']:.2f}), built from {built}")
    print(f"answer: {state.answer}")
    print(f"outcome: {state.outcome.status if state.outcome is not None else 'none'}; "
          f"at most {agent.max_calls} model calls")


if __name__ == "__main__":
    anyio.run(main)
