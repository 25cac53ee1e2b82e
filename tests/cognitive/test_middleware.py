"""Turn middleware keeps every ability of what it wraps and composes in any order: ``check_executor`` passes
for ``Summarize`` and ``ReuseResults`` alone and in every order of two, and patterns that derive stages
(``Managed``) run on them."""

from collections.abc import Callable, Sequence

import pytest

from cognitive import Managed, ReuseResults, Summarize
from loop import Executor, Provider, Role, State, Step, Text, Tool, TurnMiddleware
from loop.testing import check_executor
from provider import Scripted, tool_call

Wrap = Callable[[Executor, Provider], Executor]


def summarize(inner: Executor, provider: Provider) -> Executor:
    return Summarize(inner, Step(provider), max_tokens=10_000)


def reuse(inner: Executor, provider: Provider) -> Executor:
    return ReuseResults(inner, tools=["echo"])


def bare(inner: Executor, provider: Provider) -> Executor:
    return TurnMiddleware(inner)


WRAPPERS = {"Summarize": summarize, "ReuseResults": reuse, "TurnMiddleware": bare}
ORDERS = [(a, b) for a in WRAPPERS for b in WRAPPERS] + [(a,) for a in WRAPPERS]


@pytest.mark.parametrize("order", ORDERS, ids=["(".join(o) + ")" * len(o) for o in ORDERS])
async def test_every_wrapper_alone_and_in_every_order_of_two_is_an_executor(order: tuple[str, ...]) -> None:
    def make(provider: Provider, tools: Sequence[Tool]) -> Executor:
        executor: Executor = Step(provider, tools=tools)
        for name in reversed(order):  # the first name is the outermost
            executor = WRAPPERS[name](executor, provider)
        return executor

    await check_executor(make)


async def test_managed_runs_on_summarize_around_reuse_and_the_other_way_round() -> None:
    from loop import tool

    @tool
    async def look(q: str) -> str:
        """Look it up."""
        return f"found {q}"

    for outer, inner in (("Summarize", "ReuseResults"), ("ReuseResults", "Summarize")):
        model = Scripted([tool_call("look", {"q": "a"}), tool_call("look", {"q": "a"}), "done"])
        step = Step(model, tools=[look])
        wrapped: Executor = Summarize(ReuseResults(step, tools=["look"]), Step(Scripted([])), max_tokens=10_000) \
            if outer == "Summarize" else ReuseResults(Summarize(step, Step(Scripted([])), max_tokens=10_000),
                                                      tools=["look"])
        state = await Managed(wrapped).run(State().append(Role.USER, Text("find a")))
        assert state.answer == "done"
        second = state[4].tool_results[0]
        assert second.content.startswith("[reused"), f"{outer}({inner}(step)): the repeat was reused"
