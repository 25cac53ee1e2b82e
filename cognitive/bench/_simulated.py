"""The offline simulated model the harness runs on when no provider is named: a noisy solver of the built-in
tasks, played honestly through whatever a pattern asks of it."""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from cognitive.bench._minds import Chain, Mind, facts_in, marked, understand
from loop import Request, Role, ToolCall, Turn, TurnKind, Usage, UsageError, UseTool
from provider import Function, tool_call

SKILL: Mapping[str, float] = MappingProxyType({"arithmetic": 0.7, "game24": 0.25, "lookup": 0.95})
"""How often one plain attempt of each kind comes out right (for ``lookup``: with the tool, every hop taken)."""
CHECK = 0.9
"""How often the model's check of an answer or of a partial line (a rating, a critique, a verdict) is right."""
THINKING: Mapping[str, float] = MappingProxyType({"arithmetic": 0.6, "game24": 0.1, "lookup": 0.0})
"""The share of its mistakes a step-by-step worked answer avoids, by kind: writing sums out catches slips; a
puzzle needs search more than care; a fact not in view stays unknown."""
REJECTED = "does not hold up"
"""How the model's critiques say an answer is wrong; a later request showing it asks for the work again."""
_K = re.compile(r"up to (\d+)")


@attrs.frozen
class _Seen:
    """What a request shows: the question, the mind that reads it, and the turns after it."""

    question: str
    mind: Mind | None
    after: tuple[Turn, ...]
    instruction: str  # the last system turn after the question
    facts: Mapping[tuple[str, str], str]

    @property
    def line(self) -> list[str]:
        """The model's own turns since the question: thoughts, drafts, answers."""
        return [t.text for t in self.after if t.role is Role.ASSISTANT and t.text.strip()]


def _see(request: Request) -> _Seen:
    turns = request.turns
    start = max((i for i, t in enumerate(turns) if t.role is Role.USER), default=-1)
    question = turns[start].text if start >= 0 else ""
    after = turns[start + 1:]
    instruction = next((t.text for t in reversed(after) if t.role is Role.SYSTEM
                        and t.kind != TurnKind.OUTPUT_FORMAT), "")
    texts = [t.text for t in turns] + [r.content for t in turns for r in t.tool_results]
    return _Seen(question, understand(question), after, instruction, facts_in(texts))


def _candidate(seen: _Seen) -> str | None:
    """The latest answer the work so far reached (an ``Answer:`` line, else the model's last written answer),
    unless a later turn says it does not hold up."""
    texts = [t.text for t in seen.after]
    found, index = None, -1
    for i, text in enumerate(texts):
        mark = marked(text)
        if mark is not None:
            found, index = mark, i
    if found is None:
        for i in reversed(range(len(seen.after))):
            turn = seen.after[i]
            if turn.role is Role.ASSISTANT and turn.text.strip():
                if not _typed_value(turn.text) and (seen.mind is None or not seen.mind.partial(turn.text)):
                    found, index = turn.text.strip(), i
                break
    if found is None or any(REJECTED in text for text in texts[index + 1:]):
        return None
    return found


def _typed_value(text: str) -> bool:
    """Whether ``text`` is a typed answer (a JSON object or list), not a written one."""
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


class SimulatedModel:
    """A stand-in model for the built-in tasks: a noisy solver, deterministic for each request.

    **What it knows.** It reads the question's text only: the arithmetic word problems of the built-in set
    (it works their steps), Game of 24 puzzles (it can search for a solution, and can check any expression
    exactly) and chained questions about the made-up reference book (it knows none of those facts: it calls the
    ``lookup`` tool, one hop at a time, whenever it is offered, and reads the facts the conversation shows). It
    never sees a task's expected answer. Any other question it answers "I do not know".

    **Noise.** One plain attempt is right with probability ``skill[kind]`` (``SKILL``): an arithmetic attempt
    slips at one step, a Game of 24 attempt is a guess, a lookup stops one hop short. A step-by-step worked
    answer (a "step by step" instruction) avoids ``THINKING`` of those mistakes. A check (a rating, a critique,
    a verdict, a check before answering) is right with probability ``check``. Every draw comes from a random
    generator seeded by ``seed``, the request's run path and content, so one request always gets the same reply
    and the samples of ``SelfConsistency`` (other paths) are independent draws.

    **What it answers.** A plain request: ``Answer: ...`` (with its working when asked to work step by step;
    under Verify's PLAN/SOLVE/CHECK/FIX/ANSWER headings, a check of its first attempt and a second attempt when
    the check fails). When the conversation already reached an answer that no later turn rejects (a search's
    line, a debate's proposal, notes), it writes that answer. Typed asks: proposals that are real next steps
    (the next arithmetic step, or two numbers combined, good ones (24 still reachable) with probability ``skill``),
    ratings that reflect whether the line is right or can still reach 24, critiques and verdicts from its
    check, plans, decisions, whether tools are needed; any other schema gets a small valid value.

    **Usage.** Each reply reports about four characters a token for the request (turns, tools and schema) and
    for the reply, so patterns' token costs compare.

    Its figures measure the framework and the patterns' control flow (how many calls, how much context, how
    answers are checked, voted on and searched) on a known noise model, not any real model's quality: use a
    real provider for that.
    """

    __slots__ = ("seed", "skill", "check", "_last", "_repeat")

    def __init__(self, *, seed: int = 0, skill: Mapping[str, float] | None = None, check: float = CHECK) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise UsageError(f"seed is a whole number, got {seed!r}")
        merged = {**SKILL, **(skill or {})}
        for name, value in {**merged, "check": check}.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise UsageError(f"{name} is a probability from 0 to 1, got {value!r}")
        self.seed = seed
        self.skill: Mapping[str, float] = MappingProxyType(merged)
        self.check = float(check)
        self._last: Request | None = None
        self._repeat = 0

    def __call__(self, request: Request) -> list[Any]:
        # Several choices of one request (Options.n) call this with the same request: each is its own draw.
        self._repeat = self._repeat + 1 if request is self._last else 0
        self._last = request
        rng = random.Random(self._digest(request))
        seen = _see(request)
        schema = request.options.output_schema
        reply: str | ToolCall = json.dumps(self._typed(seen, schema, rng)) if schema is not None \
            else self._reply(seen, request, rng)
        written = len(reply) if isinstance(reply, str) else len(reply.name) + len(reply.arguments)
        return [reply, Usage(self._input(request) if self._repeat == 0 else 0, written // 4 + 1)]

    def _digest(self, request: Request) -> int:
        parts = [str(self.seed), request.path, str(self._repeat), str(request.options.temperature),
                 json.dumps(request.options.output_schema, sort_keys=True, default=str),
                 repr(request.options.tool_choice), ",".join(spec.name for spec in request.tools)]
        for turn in request.turns:
            parts.append(f"{turn.role}:{turn.text}")
            parts.extend(f"{c.name}({c.arguments})" for c in turn.tool_calls)
            parts.extend(r.content for r in turn.tool_results)
        return int.from_bytes(hashlib.blake2b("\x00".join(parts).encode(), digest_size=8).digest(), "big")

    @staticmethod
    def _input(request: Request) -> int:
        chars = sum(len(t.text) + sum(len(c.arguments) for c in t.tool_calls)
                    + sum(len(r.content) for r in t.tool_results) for t in request.turns)
        chars += sum(len(json.dumps(spec.parameters)) + len(spec.description) for spec in request.tools)
        if request.options.output_schema is not None:
            chars += len(json.dumps(request.options.output_schema))
        return chars // 4 + 4 * len(request.turns)

    def _judge(self, seen: _Seen, answer: str, rng: random.Random) -> bool:
        """Whether ``answer`` looks right to the model's check (right with probability ``check``)."""
        truth = bool(seen.mind.right(answer, seen.facts)) if seen.mind is not None else False
        return truth if rng.random() < self.check else not truth

    def _reply(self, seen: _Seen, request: Request, rng: random.Random) -> str | ToolCall:
        mind = seen.mind
        if mind is None:
            return "Answer: I do not know."
        skill = self.skill[mind.kind]
        if isinstance(mind, Chain) and _may_call(request, "lookup"):
            reached, missing = mind.walk(seen.facts)
            if missing is not None:
                if rng.random() < skill ** (1 / len(mind.relations)):
                    return tool_call("lookup", {"query": missing})
                return f"Answer: {reached}"  # it stopped a hop short
        instruction = seen.instruction
        if "CHECK:" in instruction and "ANSWER:" in instruction:
            return self._verify(seen, mind, skill, rng)
        thinking = "step by step" in instruction.lower()
        # Facts in view settle a chained question whatever was written before them.
        settled = isinstance(mind, Chain) and mind.walk(seen.facts)[1] is None
        candidate = None if thinking or settled else _candidate(seen)
        if candidate is not None:
            return f"Answer: {candidate}"
        if thinking:
            skill = 1 - (1 - skill) * (1 - THINKING.get(mind.kind, 0.0))
        working = mind.solve(rng, skill, seen.facts)
        return "\n".join(working) if thinking else working[-1]

    def _verify(self, seen: _Seen, mind: Mind, skill: float, rng: random.Random) -> str:
        first = mind.solve(rng, skill, seen.facts)
        holds = self._judge(seen, first[-1], rng)
        final = first if holds else mind.solve(rng, skill, seen.facts)
        fix = "none" if holds else "worked it again: " + "; ".join(final[:-1] or final)
        return (f"PLAN: {'; '.join(mind.plan())}\nSOLVE: {'; '.join(first)}\n"
                f"CHECK: {'checked another way, it holds' if holds else 'the result ' + REJECTED}\nFIX: {fix}\n"
                f"ANSWER: {marked(final[-1]) or final[-1]}")

    def _typed(self, seen: _Seen, schema: Mapping[str, Any], rng: random.Random) -> Any:
        props = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
        mind = seen.mind
        skill = self.skill.get(mind.kind, 0.0) if mind is not None else 0.0
        if "thoughts" in props:
            asked_for = _K.search(seen.instruction)
            k = int(asked_for.group(1)) if asked_for else 3
            found = mind.propose(seen.line, k, rng, skill, seen.facts) if mind is not None else []
            return {"thoughts": [{"text": p.text, "final": p.final} for p in found]
                    or [{"text": "I do not know how to go on.", "final": False}]}
        if "score" in props:
            return self._rating(seen, rng)
        answer = _candidate(seen) or ""
        holds = bool(answer) and self._judge(seen, answer, rng)
        issues = [] if holds else [f"The answer {answer!r} {REJECTED}: work it out again." if answer
                                   else "No answer was reached yet."]
        if "backed" in props:
            return {"backed": holds, "consistent": holds, "covered": holds, "issues": issues}
        if "severity" in props and "passed" in props:
            return {"passed": holds, "severity": 0.0 if holds else 0.8, "issues": issues,
                    "summary": "The answer holds up." if holds else f"The answer {REJECTED}."}
        if "severity" in props:
            return {"severity": 0.0 if holds else 0.8, "issues": issues}
        if "decision" in props:
            if not answer:
                return {"decision": "continue", "reason": "the work is not done yet"}
            return {"decision": "answer", "reason": "the answer reached holds up"} if holds else \
                {"decision": "replan", "reason": f"the answer reached {REJECTED}"}
        if "steps" in props:
            return {"steps": self._plan(seen, props["steps"])}
        if props.get("tools", {}).get("type") == "boolean":
            return {"tools": isinstance(mind, Chain)}
        return instance(dict(schema), finish=bool(answer))

    def _rating(self, seen: _Seen, rng: random.Random) -> dict[str, Any]:
        line = seen.line
        mind = seen.mind
        if mind is None or not line:
            return {"score": 0.1, "reason": "nothing to go on"}
        if mind.partial(line[-1]):
            truth = mind.promising(line)
            looks = truth if rng.random() < self.check else not truth
            score = 0.6 + 0.2 * rng.random() if looks else 0.05 + 0.2 * rng.random()
            return {"score": round(score, 3), "reason": "it can still get there" if looks else "a dead end"}
        looks = self._judge(seen, line[-1], rng)
        score = 0.9 + 0.1 * rng.random() if looks else 0.05 + 0.2 * rng.random()
        return {"score": round(score, 3), "reason": "checked, it holds" if looks else f"it {REJECTED}"}

    def _plan(self, seen: _Seen, steps: Mapping[str, Any]) -> list[Any]:
        mind = seen.mind
        if steps.get("items", {}).get("type") != "object":
            return mind.plan() if mind is not None else ["Answer the question"]
        if not isinstance(mind, Chain) or "lookup" not in seen.instruction:
            return []
        plan: list[dict[str, Any]] = []
        name = mind.name
        for index, relation in enumerate(reversed(mind.relations), 1):
            plan.append({"id": f"E{index}", "tool": "lookup", "arguments": {"query": f"{relation} of {name}"},
                         "depends_on": [f"E{index - 1}"] if index > 1 else []})
            name = f"#E{index}"
        return plan

    def __repr__(self) -> str:
        return f"SimulatedModel(seed={self.seed})"


def _may_call(request: Request, name: str) -> bool:
    choice = request.options.tool_choice
    if choice == "none" or (isinstance(choice, UseTool) and choice.name != name):
        return False
    return any(spec.name == name for spec in request.tools)


_FINISHING = ("synthesize", "answer", "final", "finish", "done", "stop")


def instance(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None, *, finish: bool = False) -> Any:
    """A small valid value of a JSON schema, for a typed ask the model has no better answer to. A choice (an
    enum) takes its first option, or, with ``finish`` (the work has reached an answer), one that ends the work
    (``synthesize``, ``answer``, ...) when it has one."""
    root = schema if root is None else root
    if "$ref" in schema:
        defs = root.get("$defs", root.get("definitions", {}))
        return instance(defs[str(schema["$ref"]).rsplit("/", 1)[-1]], root, finish=finish)
    if "enum" in schema:
        options = list(schema["enum"])
        ending = [o for o in options if str(o).lower() in _FINISHING]
        return ending[0] if finish and ending else next((o for o in options if o not in ending), options[0])
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return instance(schema[key][0], root, finish=finish)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: instance(props[name], root, finish=finish) for name in schema.get("required", props)}
    return {"array": [], "string": "ok", "integer": 1, "number": 0.5, "boolean": True}.get(str(kind))


def simulated_provider(*, seed: int = 0, skill: Mapping[str, float] | None = None, check: float = CHECK) -> Function:
    """``provider.Function(SimulatedModel(...))``: the offline model the harness uses when given no provider."""
    return Function(SimulatedModel(seed=seed, skill=skill, check=check))

