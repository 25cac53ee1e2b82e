"""Sampling: ``Options`` sampling fields reach the provider, and ``Step.sample`` returns n branches."""

import itertools
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

import loop
from loop import (Delta, Finish, Options, ProviderInfo, Request, Role, Stamped, State, Step, Text, TextDelta,
                  ToolResult, Usage, UsageError, provider_info, tool)
from loop._spend import Spend
from loop._scope import charging
from provider import Function, tool_call

START = State().append(Role.USER, Text("pick a number"))


class Recorded:
    """Forwards to ``inner``, keeping every request; says what ``inner`` says of itself (``info``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.requests: list[Request] = []

    @property
    def info(self) -> ProviderInfo:
        return provider_info(self.inner)  # how a provider wrapper forwards what its provider says

    def stream(self, request: Request) -> AsyncIterator[Delta]:
        self.requests.append(request)
        return self.inner.stream(request)


class OneAtATime:
    """A provider that says nothing of itself (one choice per request): one answer per request, naming its
    seed and path."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    async def stream(self, request: Request) -> AsyncIterator[Delta]:
        self.requests.append(request)
        await anyio.sleep(0)
        yield TextDelta(f"seed {request.options.seed} at {request.path}")
        yield Finish("stop")


class IgnoresN:
    """Claims to return several choices (``info.choices``) but answers only choice 0, as some compatible
    servers do."""

    info = ProviderInfo(choices=True)

    def __init__(self) -> None:
        self.requests: list[Request] = []

    async def stream(self, request: Request) -> AsyncIterator[Delta]:
        self.requests.append(request)
        yield TextDelta(f"answer {len(self.requests)}")
        yield Finish("stop")


def counting(usage_once: Usage | None = None) -> Function:
    """A ``Function`` provider answering ``answer 0``, ``answer 1``... one per call of its function; with
    ``usage_once``, only the first answer carries usage (a multi-choice response reports it once)."""
    counter = itertools.count()

    def answer(request: Request) -> Any:
        i = next(counter)
        if usage_once is not None and i == 0:
            return [f"answer {i}", usage_once]
        return f"answer {i}"

    return Function(answer)


# -- options ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("settings", [
    {"n": 0}, {"n": True}, {"seed": 1.5}, {"seed": "1"}, {"top_p": 0}, {"top_p": 1.5}, {"top_p": True},
    {"reasoning_effort": "max"}, {"extra": ["a"]}, {"extra": {"": 1}},
])
def test_bad_sampling_options_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        Options(**settings)


async def test_sampling_options_pass_through_to_the_request() -> None:
    provider = Recorded(Function(lambda request: "ok"))
    step = Step(provider, options=Options(seed=1, top_p=0.5, extra={"logprobs": True}))
    await step.turn(START, Options(seed=7, reasoning_effort="high", extra={"user": "u1"}))
    (request,) = provider.requests
    opts = request.options
    assert (opts.seed, opts.top_p, opts.reasoning_effort) == (7, 0.5, "high")
    assert opts.extra == {"user": "u1"}, "an override's extra replaces the defaults' whole"
    assert opts.n is None


async def test_n_passes_through_to_a_provider() -> None:
    provider = Recorded(OneAtATime())
    await Step(provider).turn(START, Options(n=1, seed=3))
    assert provider.requests[0].options.n == 1 and provider.requests[0].options.seed == 3


async def test_a_turn_asked_for_several_choices_does_not_mix_them() -> None:
    counter = itertools.count()
    step = Step(Function(lambda request: f"choice {next(counter)}"))
    try:
        state = await step.turn(START, Options(n=2))
    except UsageError:
        return  # refusing n > 1 in a plain turn is a fine answer too
    assert state.answer in ("choice 0", "choice 1")


# -- Step.sample: a provider returning several choices ----------------------------------------------------------


async def test_sample_asks_a_provider_with_choices_once() -> None:
    provider = Recorded(counting())
    samples = await Step(provider).sample(START, 5, Options(temperature=0.7))
    assert len(provider.requests) == 1
    request = provider.requests[0]
    assert request.options.n == 5 and request.options.temperature == 0.7
    assert request.path == "samples"
    assert [s.answer for s in samples] == [f"answer {i}" for i in range(5)]
    assert all(len(s) == 2 and s[:1] == START[:1] for s in samples)
    assert all(s.last.role is Role.ASSISTANT for s in samples)  # type: ignore[union-attr]


async def test_native_samples_are_charged_once() -> None:
    provider = Recorded(counting(usage_once=Usage(100, 20)))
    spend = Spend(loop.Budget(max_turns=1))
    with loop.scope("Vote"), charging(spend):
        samples = await Step(provider).sample(START, 5)
    assert len(provider.requests) == 1 and provider.requests[0].path == "Vote/samples"
    assert spend.spent == loop.Spent(turns=1, input_tokens=100, output_tokens=20), "one request, one turn"
    assert dict(spend.by_path) == {"Vote/samples": spend.spent}
    assert samples[0].usage == Usage(100, 20) and all(s.usage == Usage() for s in samples[1:])


async def test_n_of_one_is_a_plain_turn() -> None:
    provider = Recorded(counting())
    (only,) = await Step(provider).sample(START, 1)
    assert only.answer == "answer 0" and provider.requests[0].options.n is None
    assert provider.requests[0].path == "sample 1"


@pytest.mark.parametrize("n", [0, -1, True, 2.0])
async def test_bad_n_is_refused(n: Any) -> None:
    with pytest.raises(UsageError):
        await Step(counting()).sample(START, n)


async def test_sample_refuses_what_is_not_a_state() -> None:
    with pytest.raises(UsageError):
        await Step(counting()).sample([], 2)  # type: ignore[arg-type]


# -- Step.sample: any other provider -------------------------------------------------------------------------


async def test_a_provider_without_choices_gets_n_concurrent_requests_with_seeds() -> None:
    provider = OneAtATime()
    with loop.scope("SelfConsistency"):
        samples = await Step(provider).sample(START, 5, Options(seed=40))
    assert len(provider.requests) == 5
    assert sorted((r.options.seed, r.path) for r in provider.requests) == [
        (40 + i, f"SelfConsistency/sample {i + 1}") for i in range(5)]
    assert all(r.options.n is None for r in provider.requests)
    assert [s.answer for s in samples] == [f"seed {40 + i} at SelfConsistency/sample {i + 1}" for i in range(5)]


async def test_without_a_seed_no_seed_is_invented() -> None:
    provider = OneAtATime()
    await Step(provider).sample(START, 3)
    assert [r.options.seed for r in provider.requests] == [None, None, None]


async def test_each_of_n_requests_is_charged() -> None:
    spend = Spend(loop.Budget())
    with charging(spend):
        await Step(OneAtATime()).sample(START, 3)
    assert spend.spent.turns == 3
    assert set(spend.by_path) == {"sample 1", "sample 2", "sample 3"}


async def test_a_failing_sample_raises() -> None:
    def answer(request: Request) -> Any:
        return RuntimeError("down") if request.path.endswith("2") else "fine"

    class NoChoices:
        def __init__(self) -> None:
            self.inner = Function(answer)

        def stream(self, request: Request) -> AsyncIterator[Delta]:
            return self.inner.stream(request)

    with pytest.raises(RuntimeError, match="down"):
        await Step(NoChoices()).sample(START, 3)


# -- a provider that ignores n -------------------------------------------------------------------------------


async def test_a_provider_ignoring_n_still_yields_n_samples() -> None:
    provider = IgnoresN()
    samples = await Step(provider).sample(START, 5)
    assert len(samples) == 5
    assert len(provider.requests) == 5
    assert provider.requests[0].options.n == 5
    assert all(r.options.n is None for r in provider.requests[1:]), "the missing ones are asked one by one"
    assert samples[0].answer == "answer 1"
    assert sorted(s.answer for s in samples[1:]) == [f"answer {i}" for i in range(2, 6)]  # type: ignore[type-var]
    assert all(len(s) == 2 for s in samples)


async def test_a_re_asked_sample_runs_under_its_own_path() -> None:
    provider = IgnoresN()
    await Step(provider).sample(START, 3)
    assert sorted(r.path for r in provider.requests[1:]) == ["sample 2", "sample 3"]


# -- samples are branches ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [counting, OneAtATime], ids=["choices", "n requests"])
async def test_samples_are_branches(make: Any) -> None:
    step = Step(make())
    with step.events.subscribe(buffer=None, stamped=True) as sub:
        with loop.main_line("chat"):
            await step.sample(START, 3)
            await step.turn(START)
        events = sub.drain()
    deltas = [e for e in events if isinstance(e, Stamped) and isinstance(e.event, TextDelta)]
    sampled, main = deltas[:-1], deltas[-1]
    assert len(sampled) == 3
    assert all(not e.main and e.path.startswith("chat/sample") for e in sampled)
    assert main.main and main.path == "chat"


# -- tool calls in samples ---------------------------------------------------------------------------------------


def tools_step(provider_for: Any) -> tuple[Step, list[tuple[str, bool]]]:
    seen: list[tuple[str, bool]] = []

    @tool
    async def roll(sides: int) -> int:
        """Roll a die."""
        here = loop.current_scope()
        seen.append((here.path, here.on_main_line))
        return sides

    return Step(provider_for(), tools=[roll]), seen


async def test_tool_calls_of_native_samples_are_run_per_sample() -> None:
    counter = itertools.count()

    def answer(request: Request) -> Any:
        i = next(counter)
        return [tool_call("roll", {"sides": i + 2}, id=f"r{i}")] if i != 1 else "no tools for me"

    step, seen = tools_step(lambda: Function(answer))
    samples = await step.sample(START, 3)
    assert [len(s) for s in samples] == [3, 2, 3]
    assert samples[0].last.parts == (ToolResult("r0", "roll", "2"),)  # type: ignore[union-attr]
    assert samples[2].last.parts == (ToolResult("r2", "roll", "4"),)  # type: ignore[union-attr]
    assert samples[1].answer == "no tools for me"
    assert all(s.pending_calls == () for s in samples)
    assert sorted(seen) == [("sample 1/tool:roll#r0", False), ("sample 3/tool:roll#r2", False)]


async def test_tool_calls_of_samples_from_n_requests_are_run_per_sample() -> None:
    class NoChoices:
        def __init__(self) -> None:
            self.inner = Function(lambda request: [tool_call(
                "roll", {"sides": int(request.path[-1])}, id=f"c{request.path[-1]}")])

        def stream(self, request: Request) -> AsyncIterator[Delta]:
            return self.inner.stream(request)

    step, seen = tools_step(NoChoices)
    samples = await step.sample(START, 3)
    assert [s.last.parts for s in samples] == [  # type: ignore[union-attr]
        (ToolResult(f"c{i}", "roll", str(i)),) for i in (1, 2, 3)]
    assert sorted(seen) == [(f"sample {i}/tool:roll#c{i}", False) for i in (1, 2, 3)]


async def test_native_samples_tool_calls_are_charged() -> None:
    counter = itertools.count()
    step, _ = tools_step(lambda: Function(lambda request: [tool_call("roll", {"sides": 6}, id=f"r{next(counter)}")]))
    spend = Spend(loop.Budget())
    with charging(spend):
        await step.sample(START, 3)
    assert spend.spent.turns == 1 and spend.spent.tool_calls == 3
    assert {p: s.tool_calls for p, s in spend.by_path.items() if s.tool_calls} == {
        "sample 1": 1, "sample 2": 1, "sample 3": 1}



async def run_tools_false(native: bool) -> None:
    counter = itertools.count()
    function = Function(lambda request: [tool_call("roll", {"sides": 6}, id=f"r{next(counter)}")])

    class NoChoices:
        def stream(self, request: Request) -> AsyncIterator[Delta]:
            return function.stream(request)

    step, seen = tools_step(lambda: function if native else NoChoices())
    samples = await step.sample(START, 3, Options(run_tools=False))
    assert seen == [], "no sample's calls were run"
    assert all(len(s.pending_calls) == 1 and s.outcome.status == "pending" for s in samples)  # type: ignore[union-attr]


async def test_run_tools_false_leaves_every_samples_calls_pending() -> None:
    await run_tools_false(native=False)


async def test_run_tools_false_leaves_native_samples_calls_pending() -> None:
    await run_tools_false(native=True)
