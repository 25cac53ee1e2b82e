"""One stateless pattern instance serves many conversations at once without cross-talk."""

import json

import anyio

from cognitive import ReAct, WithVerification
from loop import Request, Role, State, Step, Text, tool
from provider import Function, tool_call
from verifier import FunctionVerifier


@tool
async def double(n: int) -> int:
    """Double a number, slowly enough that runs interleave."""
    await anyio.sleep(0.001 * (n % 7))
    return 2 * n


def model(request: Request):
    """Asks the tool to double the user's number, then answers with the tool's result."""
    question = int(request.turns[0].text)
    last = request.turns[-1]
    if last.role is Role.USER:
        return tool_call("double", {"n": question})
    (result,) = last.tool_results
    return f"{question} doubled is {result.content}"


async def run_many(pattern, count: int) -> dict[int, State]:
    results: dict[int, State] = {}

    async def one(n: int) -> None:
        results[n] = await pattern.run(State().append(Role.USER, Text(str(n))))

    async with anyio.create_task_group() as group:
        for n in range(count):
            group.start_soon(one, n)
    return results


def assert_no_cross_talk(results: dict[int, State]) -> None:
    for n, state in results.items():
        assert state.answer == f"{n} doubled is {2 * n}"
        (call,) = [c for t in state for c in t.tool_calls]
        assert json.loads(call.arguments) == {"n": n}
        (result,) = [r for t in state for r in t.tool_results]
        assert result.call_id == call.id and result.content == str(2 * n)


async def test_one_react_instance_runs_100_states_concurrently() -> None:
    step = Step(Function(model), tools=[double])
    pattern = ReAct(step)
    results = await run_many(pattern, 100)
    assert len(results) == 100
    assert_no_cross_talk(results)
    # Tool-call ids are unique across every conversation.
    ids = [c.id for s in results.values() for t in s for c in t.tool_calls]
    assert len(set(ids)) == 100


async def test_a_verified_pattern_instance_runs_100_states_concurrently() -> None:
    step = Step(Function(model), tools=[double])

    def doubled(state: State) -> bool:
        n = int(state[0].text)
        return state.answer == f"{n} doubled is {2 * n}"

    pattern = WithVerification(ReAct(step), step, verifiers=[FunctionVerifier(doubled)])
    results = await run_many(pattern, 100)
    assert_no_cross_talk(results)
    assert all(s.outcome.data["WithVerification"]["retries"] == 0 for s in results.values())
