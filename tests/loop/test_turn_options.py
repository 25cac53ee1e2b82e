"""``loop.turn_options``: options every turn of a block takes over its step's own, at any depth."""

import functools
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

import loop
from loop import Delta, Finish, Options, Request, Role, State, Step, Text, TextDelta, UsageError, tool, turn_options
from provider import Function, Scripted, tool_call

START = State().append(Role.USER, Text("hi"))


class Recorder:
    """A provider answering "ok" and keeping every request; one answer per request (no ``supports_choices``)."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    async def stream(self, request: Request) -> AsyncIterator[Delta]:
        self.requests.append(request)
        await anyio.sleep(0)
        yield TextDelta("ok")
        yield Finish("stop")


def recorded() -> tuple[Recorder, Step]:
    provider = Recorder()
    return provider, Step(provider, options=Options(model="m", temperature=0.1, max_tokens=50))


async def test_a_turn_in_the_block_takes_them_over_its_steps_own() -> None:
    provider, step = recorded()
    with turn_options(Options(temperature=0.9, seed=4)):
        await step.turn(START)
    await step.turn(START)
    inside, after = (r.options for r in provider.requests)
    assert inside == Options(model="m", temperature=0.9, max_tokens=50, seed=4)
    assert after == step.options  # only inside the block


async def test_per_call_options_still_win() -> None:
    provider, step = recorded()
    with turn_options(Options(temperature=0.9, seed=4)):
        await step.turn(START, Options(temperature=0.0))
    assert provider.requests[0].options == Options(model="m", temperature=0.0, max_tokens=50, seed=4)


async def test_nested_blocks_combine_the_inner_winning_field_by_field() -> None:
    provider, step = recorded()
    with turn_options(Options(temperature=0.9, seed=1)) as outer:
        with turn_options(Options(seed=2, top_p=0.5)) as inner:
            assert inner.options == Options(temperature=0.9, seed=2, top_p=0.5)
            await step.turn(START)
        assert loop.current_scope() is outer
        await step.turn(START)
    assert loop.current_scope().options is None
    nested, back = (r.options for r in provider.requests)
    assert (nested.temperature, nested.seed, nested.top_p) == (0.9, 2, 0.5)
    assert (back.temperature, back.seed, back.top_p) == (0.9, 1, None)


async def test_the_block_keeps_the_path_line_and_budgets() -> None:
    with loop.main_line("chat"), loop.scope("Vote") as here:
        with turn_options(Options(temperature=0.7)) as inside:
            assert (inside.path, inside.line, inside.task, inside.budgets) == (here.path, here.line, here.task,
                                                                               here.budgets)
            assert inside.on_main_line


async def test_every_step_in_the_block_takes_them() -> None:
    first, one = recorded()
    second = Recorder()
    two = Step(second, options=Options(model="other"))
    with turn_options(Options(temperature=0.7)):
        await one.turn(START)
        await two.turn(START)
        await one.derive(options=Options(model="small")).turn(START)
    assert [r.options.temperature for r in (*first.requests, *second.requests)] == [0.7, 0.7, 0.7]
    # Over the step's own, a derived step's too: the block's options sit above every step's.
    assert [r.options.model for r in first.requests] == ["m", "small"]
    with turn_options(Options(model="forced")):
        await one.derive(options=Options(model="small")).turn(START)
    assert first.requests[-1].options.model == "forced"


async def test_branches_fan_out_tasks_and_carried_scopes_inherit_them() -> None:
    provider, step = recorded()
    with turn_options(Options(temperature=0.8)):
        with loop.branch("b"):
            await step.turn(START)
        with loop.scope("s"):
            await step.turn(START)
        with loop.main_line("m"):
            await step.turn(START)
        await loop.fan_out([functools.partial(step.turn, START)] * 2, name="sample")
        async with anyio.create_task_group() as group:
            group.start_soon(step.turn, START)
        carried = loop.carry()
    with carried:
        await step.turn(START)
    assert len(provider.requests) == 7
    assert all(r.options.temperature == 0.8 for r in provider.requests)


async def test_a_tool_that_runs_an_agent_passes_them_on() -> None:
    inner = Recorder()
    helper = Step(inner)

    @tool
    async def consult(question: str) -> str:
        """Ask a helper model."""
        return (await helper.turn(State().append(Role.USER, Text(question)))).answer or ""

    step = Step(Scripted([[tool_call("consult", {"question": "?"})], "done"]), tools=[consult])
    with turn_options(Options(temperature=0.6)):
        await step.turn(START)
    assert inner.requests[0].options.temperature == 0.6


async def test_sample_honours_them_one_request_per_sample() -> None:
    provider, step = recorded()
    with turn_options(Options(temperature=0.7, seed=10)):
        samples = await step.sample(START, 3)
    assert len(samples) == 3
    asked = sorted((r.options.temperature, r.options.seed) for r in provider.requests)  # concurrently: any order
    assert asked == [(0.7, 10), (0.7, 11), (0.7, 12)]


async def test_sample_honours_them_with_a_provider_returning_several_choices() -> None:
    requests: list[Request] = []

    def answer(request: Request) -> str:
        requests.append(request)
        return "ok"

    step = Step(Function(answer), options=Options(temperature=0.1))
    with turn_options(Options(temperature=0.7)):
        await step.sample(START, 2)
        await step.sample(START, 2, Options(temperature=1.0))
    assert [(r.options.n, r.options.temperature) for r in requests] == [(2, 0.7), (2, 0.7), (2, 1.0), (2, 1.0)]


async def test_ask_in_the_block_keeps_tools_off() -> None:
    script = Scripted(['{"ok": true}'])
    with turn_options(Options(tool_choice="auto", temperature=0.3)):
        asked = await loop.ask(Step(script), START, {"type": "object", "properties": {"ok": {"type": "boolean"}}})
    assert asked.value == {"ok": True}
    assert (script.requests[0].options.tool_choice, script.requests[0].options.temperature) == ("none", 0.3)


@pytest.mark.parametrize("value", [None, {"temperature": 0.7}, "fast", Options])
def test_anything_but_options_is_refused(value: Any) -> None:
    with pytest.raises(UsageError, match="turn_options takes loop.Options"):
        turn_options(value)
