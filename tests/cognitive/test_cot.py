"""ChainOfThought: one turn that reasons step by step, the answer separated from the working; none of it on a
model that reasons on its own."""

import uuid
from typing import Any

import pytest
import structlog

from cognitive import SelfConsistency, WithOutput, answer_value
from cognitive.search._cot import PROMPT, ChainOfThought, reasoning_model
from cognitive.testing import check_pattern
from loop import Options, Request, Role, State, Step, Text, UsageError, tool, turn_options
from provider import Function

WORKING = "12 pens are 4 packs of 3.\nEach pack costs $2, so 4 packs cost $8.\nAnswer: 12 pens cost $8."
EXAMPLES = [("What is 6 × 7?", "6 × 7 is 6 × 5 plus 6 × 2: 30 + 12 = 42.\nAnswer: 42"),
            ("Is 91 prime?", "91 = 7 × 13.\nAnswer: no")]


class Model:
    """Notes every request and answers with ``reply`` (the working of a chain of thought, by default)."""

    def __init__(self, reply: str = WORKING) -> None:
        self.reply = reply
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> str:
        self.requests.append(request)
        return self.reply


@tool
async def calculator(expression: str) -> str:
    """Works a sum out."""
    return "8"


def ask(text: str = "Pens come in packs of 3 for $2. What do 12 pens cost?") -> State:
    return State().append(Role.USER, Text(text))


def made(reply: str = WORKING, **options: Any) -> tuple[Model, Step]:
    model = Model(reply)
    return model, Step(Function(model), tools=[calculator], options=Options(**options) if options else None)


def data(state: State) -> dict[str, Any]:
    assert state.outcome is not None
    return dict(state.outcome.data["ChainOfThought"])


async def test_zero_shot_asks_for_step_by_step_working_and_answers_with_the_final_line() -> None:
    model, step = made()
    state = await ChainOfThought(step).run(ask())
    assert state.answer == "12 pens cost $8." and state.outcome is not None and state.outcome.ok
    # One request: the conversation, the instructions as a system turn, tools off.
    (request,) = model.requests
    assert [t.role for t in request.turns] == [Role.USER, Role.SYSTEM]
    assert request.turns[-1].text == PROMPT and "Worked examples" not in request.turns[-1].text
    assert request.options.tool_choice == "none" and request.path == "ChainOfThought/working"
    # The conversation keeps the instructions and the answer; the working is kept in the answer's meta.
    assert [(t.role, t.kind) for t in state] == [(Role.USER, None), (Role.SYSTEM, "cot"),
                                                 (Role.ASSISTANT, "cot_answer")]
    assert state[-1].meta["working"] == WORKING
    assert data(state) == {"prompted": True, "examples": 0, "model": None, "reasoning_model": False,
                           "separated": True}


async def test_few_shot_shows_the_worked_examples_in_the_instructions() -> None:
    model, step = made()
    state = await ChainOfThought(step, examples=EXAMPLES).run(ask())
    instructions = model.requests[0].turns[-1].text
    assert instructions.startswith(PROMPT)
    assert ("Worked examples of the reasoning wanted:\n\nQuestion: What is 6 × 7?\n6 × 7 is 6 × 5 plus 6 × 2: "
            "30 + 12 = 42.\nAnswer: 42\n\nQuestion: Is 91 prime?\n91 = 7 × 13.\nAnswer: no") in instructions
    assert state.answer == "12 pens cost $8." and data(state)["examples"] == 2


async def test_a_reply_without_an_answer_line_is_given_whole_and_degraded() -> None:
    _, step = made("Four packs at $2 make $8.")
    state = await ChainOfThought(step).run(ask())
    assert state.answer == "Four packs at $2 make $8." and state.degraded and state.outcome is not None
    assert "no \"Answer:\" line" in state.outcome.reason and not data(state)["separated"]
    _, step = made("")
    state = await ChainOfThought(step).run(ask())
    assert state.degraded and state.outcome is not None and "no answer" in state.outcome.reason


async def test_the_last_answer_line_wins_and_a_final_answer_heading_counts() -> None:
    _, step = made("Answer: maybe $6?\nNo: 4 packs, not 3.\n**Final answer:** $8")
    state = await ChainOfThought(step).run(ask())
    assert state.answer == "$8" and not state.degraded


async def test_a_reasoning_model_gets_no_prompt_and_it_is_logged_once() -> None:
    name = f"o3-mini-{uuid.uuid4().hex[:8]}"  # logged once per process: a name no other test used
    model, step = made("$8.", model=name)
    with structlog.testing.capture_logs() as logs:
        first = await ChainOfThought(step).run(ask())
        second = await ChainOfThought(step).run(ask("And 24 pens?"))
    assert first.answer == "$8." and second.answer == "$8." and not first.degraded
    for request in model.requests:
        assert [t.role for t in request.turns] == [Role.USER] and request.options.tool_choice == "none"
        assert request.path == "ChainOfThought"
    assert [(t.role, t.kind) for t in first] == [(Role.USER, None), (Role.ASSISTANT, None)]
    assert data(first) == {"prompted": False, "examples": 0, "model": name, "reasoning_model": True}
    told = [entry for entry in logs if "reasons on its own" in entry["event"]]
    assert len(told) == 1 and told[0]["model"] == name and told[0]["log_level"] == "info"


async def test_reasoning_effort_or_the_setting_decides_as_well() -> None:
    model, step = made("$8.", model="claude-sonnet-4-5", reasoning_effort="high")  # extended thinking on
    state = await ChainOfThought(step).run(ask())
    assert not data(state)["prompted"] and len(model.requests[0].turns) == 1

    model, step = made(model="o3")
    state = await ChainOfThought(step, reasoning_models=False).run(ask())
    assert data(state)["prompted"] and model.requests[0].turns[-1].text == PROMPT

    model, step = made("$8.", model="gpt-4o")
    state = await ChainOfThought(step, reasoning_models=True).run(ask())
    assert not data(state)["prompted"]

    model, step = made("$8.", model="house-reasoner-v2")
    state = await ChainOfThought(step, reasoning_models=["house-reasoner-*"]).run(ask())
    assert not data(state)["prompted"]
    state = await ChainOfThought(step).run(ask())
    assert data(state)["prompted"]


async def test_a_model_named_for_the_run_counts() -> None:
    model, step = made("$8.", model="gpt-4o")
    with turn_options(Options(model="o1")):
        state = await ChainOfThought(step).run(ask())
    assert not data(state)["prompted"] and data(state)["model"] == "o1"


def test_which_model_names_reason_on_their_own() -> None:
    for name in ("o1", "o1-mini", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini", "gpt-5.1", "openai/o3-mini",
                 "deepseek-reasoner", "DeepSeek-R1-Distill-Qwen-7B", "qwq-32b", "qwen3-30b-a3b-thinking-2507",
                 "gemini-2.5-pro"):
        assert reasoning_model(name), name
    for name in ("gpt-4o", "gpt-4o-mini", "gpt-5-chat-latest", "gpt-5.1-chat-latest", "claude-sonnet-4-5",
                 "deepseek-chat", "llama-3.1-8b", "gemini-2.5-flash", "smollm2-135m"):
        assert not reasoning_model(name), name
    assert reasoning_model("house-reasoner-v2", ["house-*"])


async def test_it_passes_the_pattern_conformance_check() -> None:
    await check_pattern(lambda step: ChainOfThought(step), reply=lambda request: WORKING)
    await check_pattern(lambda step: ChainOfThought(step, examples=EXAMPLES))  # no answer line: still answers


async def test_a_typed_answer_is_asked_for_on_the_answer_line() -> None:
    model = Model('Four packs at $2.\nAnswer: {"cost": 8}')
    step = Step(Function(model))
    shape = {"type": "object", "properties": {"cost": {"type": "integer"}}, "required": ["cost"]}
    state = await WithOutput(ChainOfThought(step), step, shape).run(ask())
    assert answer_value(state, shape) == {"cost": 8}
    assert len(model.requests) == 1, "the answer line was already the value: no formatting turn"
    assert 'one JSON value that follows this schema:\n{"type":"object"' in model.requests[0].turns[-1].text


async def test_self_consistency_votes_over_the_final_answers_not_the_working() -> None:
    replies = iter(["Working one.\nAnswer: $8", "Working two, longer.\nAnswer: $8", "Other working.\nAnswer: $6"])
    step = Step(Function(lambda request: next(replies)))
    state = await SelfConsistency(ChainOfThought(step), n=3).run(ask())
    assert state.outcome is not None and state.outcome.data["SelfConsistency"]["votes"] == {"$8": 2, "$6": 1}


def test_settings_are_checked() -> None:
    _, step = made()
    bad: list[tuple[Any, str]] = [
        (lambda: ChainOfThought(step, examples="Q: 1+1? A: 2"), "pairs"),  # type: ignore[arg-type]
        (lambda: ChainOfThought(step, examples=[("What is 1 + 1?",)]), "example 0"),  # type: ignore[list-item]
        (lambda: ChainOfThought(step, examples=[("What is 1 + 1?", "2")]), "its own \"Answer: ...\" line"),
        (lambda: ChainOfThought(step, reasoning_models="o3*"), "list of model-name patterns"),
        (lambda: ChainOfThought(step, reasoning_models=[""]), "non-empty strings"),
        (lambda: ChainOfThought(step, prompt=" "), "prompt"),
        (lambda: ChainOfThought(Function(lambda r: "x")), "TurnExecutor"),  # type: ignore[arg-type]
    ]
    for build, message in bad:
        with pytest.raises(UsageError, match=message):
            build()
    assert repr(ChainOfThought(step, examples=EXAMPLES, reasoning_models=False)).endswith(
        "examples=2, reasoning_models=False)")
