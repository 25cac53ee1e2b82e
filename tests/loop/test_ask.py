"""``loop.ask``: one tool-free exchange whose answer is a value of a type, retried with what was wrong."""

import dataclasses
import json
from typing import Any, TypedDict

import attrs
import pytest

import loop
from loop import (Asked, DeltaStream, Options, OutputType, ProviderInfo, Request, Role, State, Step, Text,
                  TurnCompleted, TurnKind, UsageError, ask, provider_info, tool)
from loop._ask import ASK_NATIVE_PROMPT, ASK_PROMPT
from loop.errors import VerificationFailed
from provider import Function, Scripted, tool_call

START = State().append(Role.USER, Text("Route this: my invoice is wrong."))


@attrs.frozen
class Route:
    team: str
    urgent: bool


@dataclasses.dataclass
class Score:
    value: float


class Pair(TypedDict):
    a: int
    b: int


SCHEMA_TEXT = json.dumps(OutputType.of(Route).schema, separators=(",", ":"))


class Silent:
    """A provider that says nothing of itself (no ``info``): it is not taken to honour a native schema."""

    def __init__(self, inner: Function) -> None:
        self.inner = inner

    def stream(self, request: Request) -> DeltaStream:
        return self.inner.stream(request)


class Refusing(Function):
    """A ``Function`` provider that says it does not honour ``output_schema`` natively."""

    info = ProviderInfo(choices=True, json_schema=False)


async def test_a_valid_first_answer_is_the_value() -> None:
    script = Scripted(['{"team": "billing", "urgent": false}'])
    asked = await ask(Step(script), START, Route)
    assert asked == Asked(Route("billing", False), asked.state, 1)
    assert [t.role for t in asked.state] == [Role.USER, Role.SYSTEM, Role.ASSISTANT]
    prompt = asked.state[1]
    assert prompt.kind == TurnKind.OUTPUT_FORMAT
    assert asked.state.prefix(1) == START
    assert script.requests[0].turns == asked.state.prefix(2).turns  # the model saw the asking turn


async def test_a_provider_that_honours_the_schema_natively_is_sent_it_once() -> None:
    script = Scripted(['{"team": "billing", "urgent": false}'])
    assert provider_info(Step(script)).json_schema
    asked = await ask(Step(script), START, Route)
    request = script.requests[0]
    assert request.options.output_schema == OutputType.of(Route).schema  # the copy the provider shows the model
    assert asked.state[1].text == ASK_NATIVE_PROMPT  # and none in the prompt
    assert "schema" not in ASK_NATIVE_PROMPT and "JSON value" in ASK_NATIVE_PROMPT and "tools" in ASK_NATIVE_PROMPT


@pytest.mark.parametrize("provider", ["silent", "refusing"])
async def test_a_provider_that_does_not_say_it_honours_the_schema_gets_it_in_the_prompt_too(provider: str) -> None:
    seen: list[Request] = []

    def model(request: Request) -> str:
        seen.append(request)
        return '{"team": "billing", "urgent": false}'

    made: Any = Silent(Function(model)) if provider == "silent" else Refusing(model)
    assert not provider_info(Step(made)).json_schema
    asked = await ask(Step(made), START, Route)
    assert asked.value == Route("billing", False)
    assert asked.state[1].text == ASK_PROMPT.format(schema=SCHEMA_TEXT)
    assert seen[0].turns[-1] == asked.state[1]
    assert seen[0].options.output_schema == OutputType.of(Route).schema  # still asked for natively as well


async def test_a_runner_that_says_nothing_of_its_provider_gets_the_schema_in_the_prompt() -> None:
    script = Scripted(['{"team": "billing", "urgent": false}'])
    asked = await ask(TurnOnly(Step(script)), START, Route)
    assert asked.state[1].text == ASK_PROMPT.format(schema=SCHEMA_TEXT)


@pytest.mark.parametrize(
    ("output_type", "reply", "value"),
    [
        (Score, "```json\n{\"value\": 3}\n```", Score(3.0)),
        (Pair, 'Sure: {"a": 1, "b": 2}', {"a": 1, "b": 2}),
        ({"type": "array", "items": {"type": "string"}}, '["x", "y"]', ["x", "y"]),
    ],
    ids=["dataclass-in-a-fence", "typeddict-in-prose", "json-schema"],
)
async def test_any_output_type_works(output_type: Any, reply: str, value: Any) -> None:
    assert (await ask(Step(Scripted([reply])), START, output_type)).value == value


@pytest.mark.parametrize("native", [True, False])
async def test_an_invalid_answer_gets_a_correction_naming_the_problem_then_the_valid_one_counts(native: bool) -> None:
    script = Scripted(['{"team": "billing"}', '{"team": "billing", "urgent": true}'])
    asked = await ask(Step(script), START, Route, native=native)
    assert asked.value == Route("billing", True) and asked.attempts == 2
    roles = [t.role for t in asked.state]
    assert roles == [Role.USER, Role.SYSTEM, Role.ASSISTANT, Role.SYSTEM, Role.ASSISTANT]
    correction = asked.state[3]
    assert correction.kind == TurnKind.VERIFICATION and correction.meta["attempt"] == 1
    problem = "The answer does not match the `Route` schema:\n\n- $: 'urgent' is a required property\n\n"
    if native:  # the provider shows the schema again with the request: the report names the problem
        assert correction.text == problem + "Reply again with one JSON value of the required structure."
    else:  # the text is the schema's only copy: the report gives it again
        assert correction.text == (problem + "Reply again with one JSON value that follows this schema:\n\n"
                                   f"```json\n{SCHEMA_TEXT}\n```")
    assert script.requests[1].turns[-1] == correction  # the second request ends with it


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("", "There was no answer with text."),
        ("I would send it to billing.", "The answer cannot be read as `Route`: the answer holds no JSON value"),
        ('{"team": 3, "urgent": false}', "$.team: 3 is not of type 'string'"),
    ],
    ids=["empty", "prose", "wrong-type"],
)
async def test_each_kind_of_problem_is_named(reply: str, problem: str) -> None:
    script = Scripted([reply, '{"team": "x", "urgent": false}'])
    asked = await ask(Step(script), START, Route)
    assert problem in asked.state[3].text


async def test_a_value_the_class_refuses_is_asked_again() -> None:
    @attrs.frozen
    class Percent:
        value: int = attrs.field(validator=attrs.validators.le(100))

    asked = await ask(Step(Scripted(['{"value": 250}', '{"value": 25}'])), START, Percent)
    assert asked.value == Percent(25)
    assert asked.state[3].text.startswith("The answer matches the schema but is refused: cannot build Percent")


async def test_never_valid_raises_verification_failed_carrying_the_state() -> None:
    script = Scripted(["no", "no JSON", "still none"])
    with pytest.raises(VerificationFailed, match="never matched Route in 3 attempts: The answer cannot") as caught:
        await ask(Step(script), START, Route)
    state = caught.value.state
    assert state.answer == "still none"
    assert [t.kind for t in state if t.role is Role.SYSTEM] == [TurnKind.OUTPUT_FORMAT, TurnKind.VERIFICATION,
                                                                 TurnKind.VERIFICATION]
    assert caught.value.results == ()
    assert script.remaining == 0


async def test_max_retries_zero_asks_once() -> None:
    script = Scripted(["no", "unused"])
    with pytest.raises(VerificationFailed, match="in 1 attempt: "):
        await ask(Step(script), START, Route, max_retries=0)
    assert script.used == 1


async def test_native_asks_for_structured_output_and_text_mode_does_not() -> None:
    script = Scripted(['{"team": "a", "urgent": true}'] * 2)
    await ask(Step(script), START, Route)
    await ask(Step(script), START, Route, native=False)
    native, text = (r.options for r in script.requests)
    assert native.output_schema == OutputType.of(Route).schema
    assert text.output_schema is None
    # Not sent natively, even to a provider that would honour it: the prompt is the schema's only copy.
    assert script.requests[1].turns[-1].text == ASK_PROMPT.format(schema=SCHEMA_TEXT)
    assert SCHEMA_TEXT not in script.requests[0].turns[-1].text


async def test_tools_are_off_even_if_the_model_calls_one() -> None:
    ran: list[str] = []

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        ran.append(q)
        return "found"

    script = Scripted([[Text('{"team": "a", "urgent": true}'), tool_call("lookup", {"q": "x"})]])
    asked = await ask(Step(script, tools=[lookup]), START, Route)
    assert script.requests[0].options.tool_choice == "none"
    assert ran == []  # the call got an error result, not a run
    assert asked.state.last is not None and asked.state.last.tool_results[0].is_error
    assert asked.value == Route("a", True)


async def test_options_are_laid_over_the_runners_but_cannot_turn_tools_on_or_change_the_schema() -> None:
    script = Scripted(['{"team": "a", "urgent": true}'] * 2)
    step = Step(script, options=Options(model="big", temperature=0.5))
    other = {"type": "object"}
    await ask(step, START, Route, options=Options(model="small", tool_choice="auto", output_schema=other))
    await ask(step, START, Route, options=Options(output_schema=other), native=False)
    first, second = (r.options for r in script.requests)
    assert (first.model, first.temperature, first.tool_choice) == ("small", 0.5, "none")
    assert first.output_schema == OutputType.of(Route).schema
    assert second.output_schema is None and second.model == "big"


async def test_turns_are_submitted_and_published_when_the_runner_can_submit() -> None:
    step = Step(Scripted(['{"team": "a"}', '{"team": "a", "urgent": false}']))
    with step.events.subscribe(buffer=None) as sub:
        asked = await ask(step, START, Route)
        published = [e.turn for e in sub.drain() if isinstance(e, TurnCompleted)]
    assert published == list(asked.state.turns[1:])
    assert [t.kind for t in published] == [TurnKind.OUTPUT_FORMAT, None, TurnKind.VERIFICATION, None]


class TurnOnly:
    """A ``TurnRunner`` without ``submit``: ask must append its own turns to the state."""

    def __init__(self, step: Step) -> None:
        self.step = step

    async def turn(self, state: State, options: Options | None = None) -> State:
        return await self.step.turn(state, options)


async def test_turns_are_appended_when_the_runner_cannot_submit() -> None:
    step = Step(Scripted(['{"team": "a"}', '{"team": "a", "urgent": false}']))
    with step.events.subscribe(buffer=None) as sub:
        asked = await ask(TurnOnly(step), START, Route)
        published = [e.turn.role for e in sub.drain() if isinstance(e, TurnCompleted)]
    assert [t.kind for t in asked.state if t.role is Role.SYSTEM] == [TurnKind.OUTPUT_FORMAT,
                                                                       TurnKind.VERIFICATION]
    assert published == [Role.ASSISTANT, Role.ASSISTANT]  # only the model's turns, from the step itself


async def test_in_a_branch_its_requests_carry_the_branch_path() -> None:
    paths: list[str] = []

    def model(request: Request) -> str:
        paths.append(request.path)
        return '{"team": "a", "urgent": true}'

    with loop.scope("Router"), loop.branch("route"):
        await ask(Step(Function(model)), START, Route)
    assert paths == ["Router/route"]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((object(), START, Route), {}, "TurnRunner"),
        ((None, START, Route), {}, "TurnRunner"),
        (("step", [], Route), {}, "loop.State"),
        (("step", START, Route), {"options": {"model": "x"}}, "loop.Options"),
        (("step", START, Route), {"max_retries": -1}, "max_retries"),
        (("step", START, Route), {"max_retries": True}, "max_retries"),
        (("step", START, Route), {"native": "no"}, "native"),
        (("step", START, 3), {}, "output type"),
        (("step", START, str), {}, "output type"),
    ],
)
async def test_bad_arguments_are_usage_errors(args: tuple[Any, ...], kwargs: dict[str, Any], message: str) -> None:
    script = Scripted([])
    step = Step(script)
    args = tuple(step if a == "step" else a for a in args)
    with pytest.raises(UsageError, match=message):
        await ask(*args, **kwargs)
    assert script.requests == []  # refused before any model call
