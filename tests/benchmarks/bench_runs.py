"""Runs: what budgets, the run scope, fan-out and native sampling cost.

(a) budgets: the per-turn time of ``ReAct`` run inside ``WithBudget`` (every limit set, so every turn and tool
    call is reserved and every response charged) and two nested run scopes, against the same ``ReAct`` with no
    budget in the same run. Target: within 1.2x.
(c) fan-out: 1,000 branches forked from one state and run for one turn each through ``loop.fan_out``, against
    the same 1,000 turns awaited one after another with no fan-out. Overhead per branch = (fan-out time -
    sequential time) / 1,000. Target: <= 50 µs per branch.
(d) native sampling: the input tokens charged for ``Step.sample(state, 5)`` on a provider that returns five
    choices for one request (one usage report for the response, as OpenAI's API sends), against the same
    provider asked five times. Target: the prompt is charged once (ratio 0.2).
(e) typed answers: the model calls a ``response_format`` request through the OpenAI-compatible endpoint makes
    when the model answers in the schema it is asked for, against the same request to an agent whose provider
    says nothing of itself (so the schema is asked only in a formatting turn). Target: 1 call.
(f) bounded outcomes: the bytes a ``WithBudget`` records on the answer turn of a 30 x 30 fan-out, against the
    same spend recorded per run path. Target: under 4 KB.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import Any

import anyio

import provider
from cognitive import WithBudget
from loop import (Budget, BudgetReport, Finish, ProviderInfo, Request, Role, State, Step, Text, TextDelta, Usage,
                  UsageDelta, fan_out, scope)
from tests.benchmarks._harness import Figure, interleave_async
from tests.benchmarks.bench_turn import Setup

BRANCHES = 1000
BRANCH_TARGET_US = 50.0
BUDGET_RATIO = 1.2
PROMPT_TOKENS = 1200


def _budget(turns: int) -> Budget:
    return Budget(max_turns=turns * 10, max_tool_calls=turns * 10, max_input_tokens=10**9,
                  max_output_tokens=10**9, deadline=3600.0, name="bench")


class Budgeted(Setup):
    """The (a) turn benchmark's ReAct, wrapped in a budget and two run scopes."""

    def __init__(self, tool_turns: int) -> None:
        super().__init__(tool_turns)
        self.budgeted = WithBudget(self.react, _budget(tool_turns + 1), step=self.step)

    async def framework_budgeted(self, runs: int) -> None:
        budgeted, state = self.budgeted, self.state
        with scope("session"), scope("agent"):
            for _ in range(runs):
                await budgeted.run(state)


async def _measure_budget(setup: Budgeted, runs: int, warmup: int, repeats: int) -> dict[str, float]:
    done = await setup.budgeted.run(setup.state)
    assert done.answer == "All entries read." and done.outcome is not None and done.outcome.ok, done.outcome
    spent = done.outcome.data["WithBudget"]["spent"]
    assert spent["turns"] == setup.turns_per_run and spent["tool_calls"] == setup.tool_turns, spent
    return await interleave_async(
        {"plain": lambda: setup.framework(runs), "budgeted": lambda: setup.framework_budgeted(runs)},
        warmup=warmup, repeats=repeats)


def _branch_step() -> Step:
    return Step(provider.Function(lambda request: "an answer"))


async def _measure_fan_out(branches: int, warmup: int, repeats: int) -> dict[str, float]:
    step = _branch_step()
    start = State().append(Role.USER, Text("Propose a next step."))
    jobs = [functools.partial(step.turn, start)] * branches

    async def sequential() -> None:
        for job in jobs:
            await job()

    async def fanned() -> None:
        results = await fan_out(jobs, name="branch")
        assert len(results) == branches and all(r.error is None for r in results)

    results = await fan_out(jobs[:10])
    assert [r.path for r in results[:2]] == ["branch 1", "branch 2"] and results[0].state.answer == "an answer"
    return await interleave_async({"sequential": sequential, "fan_out": fanned}, warmup=warmup, repeats=repeats)


class Choices:
    """A model that answers ``n`` choices in one response and reports the prompt's tokens once, as OpenAI does;
    with ``native=False`` it says it returns one choice per request, and does."""

    def __init__(self, native: bool) -> None:
        self.info = ProviderInfo(choices=native)

    def stream(self, request: Request) -> AsyncIterator[Any]:
        return self._stream(request.options.n or 1)

    async def _stream(self, n: int) -> AsyncIterator[Any]:
        for choice in range(n):
            yield TextDelta(f"answer {choice}", choice)
        yield UsageDelta(Usage(PROMPT_TOKENS, 5 * n), "bench-model")
        for choice in range(n):
            yield Finish("stop", choice)


async def _sampled_tokens(native: bool) -> tuple[int, int]:
    step = Step(Choices(native))
    seen: list[Any] = []
    with step.events.subscribe(buffer=None) as events:

        class Sample:
            async def run(self, state: State) -> State:
                samples = await step.sample(state, 5)
                assert len(samples) == 5 and len({s.answer for s in samples}) == (5 if native else 1)
                return samples[0]

        await WithBudget(Sample(), Budget(max_turns=10), step=step).run(State().append(Role.USER, Text("q")))
        seen = [e for e in events.drain() if isinstance(e, BudgetReport)]
    (report,) = seen
    return report.spent.input_tokens, report.spent.turns


CITY = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


class SaysNothing:
    """A provider with no ``info``: it is taken to honour no schema beside tools."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def stream(self, request: Request) -> Any:
        return self.inner.stream(request)


async def _typed_answer_calls(capable: bool) -> int:
    import httpx

    from cognitive import new_turn_processor, react_factory
    from session import Manager, MemoryStore, openai_app

    calls: list[Request] = []

    def model(request: Request) -> str:  # answers in the schema when asked for it, in prose otherwise
        calls.append(request)
        return '{"name": "Paris"}' if request.options.output_schema is not None else "It is Paris."

    made = provider.Function(model)
    manager = Manager(new_turn_processor(react_factory), provider=made if capable else SaysNothing(made),
                      store=MemoryStore())
    app = openai_app(manager, enter_manager=False)
    async with manager, httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as http:
        reply = await http.post("/v1/chat/completions", json={
            "model": "agent", "messages": [{"role": "user", "content": "Which city?"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "City", "schema": CITY}}})
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == '{"name":"Paris"}'
    return len(calls)


async def _outcome_bytes(width: int) -> tuple[int, int]:
    import json

    step = Step(provider.Function(lambda request: "leaf"))
    kept: list[Any] = []

    class Grid:
        async def row(self, state: State) -> State:
            await fan_out([functools.partial(step.turn, state)] * width, name="cell")
            return state

        async def run(self, state: State) -> State:
            with scope("Grid"):
                await fan_out([functools.partial(self.row, state)] * width, name="row")
                return await step.turn(state)

    with step.events.subscribe(buffer=None) as events:
        state = await WithBudget(Grid(), Budget(max_turns=10**6), step=step).run(State().append(Role.USER, Text("q")))
        kept = [e for e in events.drain() if isinstance(e, BudgetReport)]
    assert state.outcome is not None
    recorded = len(json.dumps(state.outcome.data["WithBudget"]))
    (report,) = kept
    per_path = len(json.dumps({p: attrs_dict(s) for p, s in report.by_path.items()}))
    return recorded, per_path


def attrs_dict(spent: Any) -> dict[str, Any]:
    import attrs

    return {k: v for k, v in attrs.asdict(spent).items() if v}


def run(quick: bool = False) -> list[Figure]:
    """Measure (a) with budgets, (c) and (d); ``quick`` uses tiny sizes (for the smoke test)."""
    tool_turns = 3 if quick else 10
    runs, warmup, repeats = (5, 1, 3) if quick else (40, 2, 9)
    setup = Budgeted(tool_turns)
    seconds = anyio.run(_measure_budget, setup, runs, warmup, repeats, backend="asyncio")
    turns = runs * setup.turns_per_run
    plain_us = seconds["plain"] / turns * 1e6
    budgeted_us = seconds["budgeted"] / turns * 1e6

    branches = 50 if quick else BRANCHES
    b_warm, b_repeats = (1, 3) if quick else (2, 7)
    fan = anyio.run(_measure_fan_out, branches, b_warm, b_repeats, backend="asyncio")
    per_branch_us = (fan["fan_out"] - fan["sequential"]) / branches * 1e6
    sequential_us = fan["sequential"] / branches * 1e6

    native_tokens, native_turns = anyio.run(_sampled_tokens, True, backend="asyncio")
    separate_tokens, separate_turns = anyio.run(_sampled_tokens, False, backend="asyncio")
    typed_calls = anyio.run(_typed_answer_calls, True, backend="asyncio")
    formatted_calls = anyio.run(_typed_answer_calls, False, backend="asyncio")
    width = 5 if quick else 30
    recorded_bytes, per_path_bytes = anyio.run(_outcome_bytes, width, backend="asyncio")
    return [
        Figure(
            "(a) runs", "ReAct per turn in WithBudget + run scopes", budgeted_us, "µs", plain_us,
            "the same ReAct, no budget", high=BUDGET_RATIO, on_ratio=True, target_text=f"ratio <= {BUDGET_RATIO}x",
            notes=(f"every limit set (turns, tool calls, tokens, deadline), two enclosing run scopes; "
                   f"{runs} runs x {setup.turns_per_run} turns per sample, median of {repeats}",),
        ),
        Figure(
            "(c) fan-out", f"overhead per branch, {branches} branches x 1 turn", per_branch_us, "µs",
            sequential_us, "one turn, awaited in sequence", high=BRANCH_TARGET_US,
            target_text=f"<= {BRANCH_TARGET_US:g} µs",
            notes=(f"fan_out of {branches} jobs forked from one state (a branch scope, a tally and a result each) "
                   f"minus the same turns awaited one by one; median of {b_repeats}",),
        ),
        Figure(
            "(d) sample", "input tokens charged for n=5, one request", float(native_tokens), "tokens",
            float(separate_tokens),
            "5 separate calls", high=0.2, on_ratio=True, target_text="ratio <= 0.2 (prompt paid once)",
            notes=(f"a {PROMPT_TOKENS}-token prompt; native: {native_turns} model call, separate: "
                   f"{separate_turns} calls, charged to one WithBudget",),
        ),
        Figure(
            "(e) typed", "model calls for a response_format request, model complies", float(typed_calls), "calls",
            float(formatted_calls), "provider that takes no schema beside tools", high=1.0, target_text="1 call",
            notes=("POST /v1/chat/completions with a json_schema response_format, ReAct agent, through the ASGI app",),
        ),
        Figure(
            "(f) outcome", f"bytes a budget records on the answer, {width} x {width} fan-out", float(recorded_bytes),
            "B", float(per_path_bytes), "the same spend per run path", high=4096.0, target_text="< 4 KB",
            notes=(f"{width * width} leaf turns in {width} rows; per pattern level on the answer, per path in the "
                   "BudgetReport event",),
        ),
    ]


if __name__ == "__main__":
    from tests.benchmarks._harness import render_table

    print(render_table(run(quick=__import__("sys").argv[-1] == "--quick")))
