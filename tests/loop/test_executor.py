"""The executor contract: ``loop.testing.check_executor`` passes for a ``Step``, a derived step and bare
middleware, and names what a broken executor gets wrong."""

from collections.abc import Sequence

import pytest

from loop import (Deriver, Executor, Options, Provider, Role, Sampler, State, Step, Text, Tool, TurnMiddleware,
                  TurnRunner, UsageError, has, require)
from loop.testing import ConformanceError, check_executor
from provider import Scripted


async def test_a_step_passes() -> None:
    await check_executor(lambda provider, tools: Step(provider, tools=tools))


async def test_a_derived_step_passes() -> None:
    await check_executor(lambda provider, tools: Step(provider, tools=tools).derive(options=Options(temperature=0.1)))


async def test_bare_middleware_passes_and_keeps_wrapping_what_it_derives() -> None:
    await check_executor(lambda provider, tools: TurnMiddleware(Step(provider, tools=tools)))
    await check_executor(lambda provider, tools: TurnMiddleware(TurnMiddleware(Step(provider, tools=tools))))


async def test_async_make_is_awaited() -> None:
    async def make(provider: Provider, tools: Sequence[Tool]) -> Executor:
        return Step(provider, tools=tools)

    await check_executor(make)


class Forgetful(TurnMiddleware):
    """Drops the options a turn is called with: the contract says they reach the provider."""

    async def turn(self, state: State, options: Options | None = None) -> State:
        return await self.inner.turn(state)


class Returns:
    """Has every ability but returns the state it was given from a turn."""

    def __init__(self, step: Step) -> None:
        self.step = step
        self.options = step.options
        self.transforms = step.transforms
        self.pipeline = step.pipeline
        self.events = step.events
        self.samples_in_one_request = False

    async def turn(self, state: State, options: Options | None = None) -> State:
        return state

    async def submit(self, state: State, role: Role, *parts: object, meta: object = None, name: object = None) -> State:
        return await self.step.submit(state, role, *parts)  # type: ignore[arg-type]

    async def sample(self, state: State, n: int, options: Options | None = None) -> tuple[State, ...]:
        return await self.step.sample(state, n, options)

    def derive(self, **changes: object) -> Executor:
        return self.step.derive(**changes)  # type: ignore[arg-type]

    async def view(self, state: State) -> State:
        return state


async def test_broken_executors_are_named() -> None:
    with pytest.raises(ConformanceError, match="must pass the options to the provider"):
        await check_executor(lambda provider, tools: Forgetful(Step(provider, tools=tools)))
    with pytest.raises(ConformanceError, match="the model's answer appended"):
        await check_executor(lambda provider, tools: Returns(Step(provider, tools=tools)))  # type: ignore[arg-type,return-value]
    with pytest.raises(ConformanceError, match="is not a loop.Executor: it has no derive, events"):
        await check_executor(lambda provider, tools: object())  # type: ignore[arg-type,return-value]


def test_abilities_are_declared_protocols() -> None:
    step = Step(Scripted([]))
    assert has(step, Executor) and has(step, Sampler) and has(step, Deriver)
    assert require(step, TurnRunner, "x") is step
    with pytest.raises(UsageError, match=r"Thing needs a Deriver \(derive\), got 1 \(it has no derive\)"):
        require(1, Deriver, "Thing")
    with pytest.raises(UsageError, match="Managed needs something that derives"):
        require(State().append(Role.USER, Text("x")), Deriver, "Managed", "something that derives")
