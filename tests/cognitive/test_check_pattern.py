"""``cognitive.testing.check_pattern``: every built-in pattern passes it, and each breach of the contract is named."""

from typing import Any

import anyio
import pytest

from cognitive import ReAct, build, names
from cognitive.testing import check_pattern
from loop import Role, State, Step, Text
from loop.errors import ConformanceError
from tests.session.registry_agent import answer, settings


@pytest.mark.parametrize("name", names())
async def test_every_registered_pattern_passes(name: str) -> None:
    await check_pattern(lambda step: build(name, step, **settings(name, step)), reply=answer)


class _Forgets:
    """Answers, but drops the question it was given."""

    def __init__(self, step: Step) -> None:
        self.step = step

    async def run(self, state: State) -> State:
        done = await self.step.turn(state)
        return State().append(Role.ASSISTANT, Text(done.answer or ""))


class _Silent:
    """Returns without an answer."""

    def __init__(self, step: Step) -> None:
        self.step = step

    async def run(self, state: State) -> State:
        return await self.step.submit(state, Role.SYSTEM, Text("thinking"))


class _Remembers:
    """Keeps the last conversation on the instance, and answers it for the next one."""

    def __init__(self, step: Step) -> None:
        self.step = step
        self.last: State | None = None

    async def run(self, state: State) -> State:
        self.last = state
        await anyio.sleep(0.01)
        return await self.step.turn(self.last)


class _Stubborn:
    """Swallows a cancellation and answers anyway."""

    def __init__(self, step: Step) -> None:
        self.step = step

    async def run(self, state: State) -> State:
        try:
            return await self.step.turn(state)
        except anyio.get_cancelled_exc_class():
            return state.append(Role.ASSISTANT, Text("done anyway"))


@pytest.mark.parametrize(("make", "message"), [
    (_Forgets, "with turns appended"),
    (_Silent, "end in a written answer"),
    (_Remembers, "with turns appended"),
    (_Stubborn, "must raise the cancellation"),
    (lambda step: object(), "is not a Pattern"),
])
async def test_a_breach_is_named(make: Any, message: str) -> None:
    with pytest.raises(ConformanceError, match=message):
        await check_pattern(make)


async def test_a_pattern_passes_with_the_default_model() -> None:
    await check_pattern(ReAct)
