"""AgentTool: a pattern asked as another agent's tool, on a conversation of its own, in a branch."""

import pytest

from cognitive import AgentTool, ReAct, WithBudget
from loop import (Budget, Caller, Role, RunContext, State, Step, Text, UsageError, main_line, run_context, tool)
from provider import Function, Scripted, tool_call


@tool
def whoami(ctx: RunContext) -> str:
    """Name the caller."""
    return ctx.caller.id if ctx.caller else "nobody"


def asked(text: str) -> State:
    return State().append(Role.USER, Text(text))


def lead(answer_from_result: bool = True) -> Function:
    def model(request):
        last = request.turns[-1]
        if last.tool_results:
            return f"lead: {last.tool_results[0].content}"
        return tool_call("helper", {"question": "who asks?"})
    return Function(model)


def test_its_schema_asks_for_one_question_and_bad_settings_are_refused() -> None:
    agent = AgentTool(ReAct(Step(Scripted(["x"]))), "helper", "Ask the helper.")
    assert agent.spec.parameters["required"] == ["question"] and agent.timeout == 600.0
    with pytest.raises(UsageError, match="needs a Pattern"):
        AgentTool(object(), "helper", "Ask.")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="name must be"):
        AgentTool(ReAct(Step(Scripted(["x"]))), "two words", "Ask.")
    with pytest.raises(UsageError, match="needs a description"):
        AgentTool(ReAct(Step(Scripted(["x"]))), "helper", " ")


async def test_the_inner_agent_answers_in_a_branch_charged_to_the_outer_budget() -> None:
    inner = ReAct(Step(Scripted([tool_call("whoami", {}), "it is ada"]), tools=[whoami]))
    step = Step(lead(), tools=[AgentTool(inner, "helper", "Ask the helper.")])
    stored: list[State] = []

    async def record(state: State) -> None:
        stored.append(state)

    with run_context(caller=Caller("ada")), main_line(recorder=record):
        state = await WithBudget(ReAct(step), Budget(max_turns=10)).run(asked("who is asking?"))
    assert state.answer == "lead: it is ada"
    assert state[2].tool_results[0].content == "it is ada"  # the inner tool saw the caller of the outer run
    assert state.outcome.data["WithBudget"]["spent"]["turns"] == 4  # two turns each
    # only the lead's turns reached the main line: every recorded state is a beginning of the lead's conversation
    assert stored and all(list(s) == list(state)[:len(s)] for s in stored) and len(stored[-1]) == len(state) == 4


async def test_a_degraded_inner_answer_says_so_and_a_failing_agent_is_an_error_result() -> None:
    looping = ReAct(Step(Function(lambda r: "gave up" if r.options.tool_choice == "none"
                                  else tool_call("whoami", {})), tools=[whoami]), max_turns=1)
    step = Step(lead(), tools=[AgentTool(looping, "helper", "Ask the helper.")])
    state = await ReAct(step).run(asked("go"))
    result = state[2].tool_results[0]
    assert result.content.startswith("gave up") and "incomplete" in result.content and not result.is_error

    def broken(request):
        raise RuntimeError("the helper's model is down")

    step = Step(lead(), tools=[AgentTool(ReAct(Step(Function(broken))), "helper", "Ask the helper.")])
    state = await ReAct(step).run(asked("go"))
    result = state[2].tool_results[0]
    assert result.is_error and "the helper's model is down" in result.content
    assert state.answer.startswith("lead: ")
