"""WithGuardrails holds a streamed answer back until its output checks pass: no delta of the answer reaches a
subscriber before, none ever does after a trip, and what is released is the stream as it was, whole and once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from cognitive import GuardrailTripped, ReAct, SingleShot, WithGuardrails
from loop import (Delta, Finish, Request, Role, State, Step, Subscription, Text, TextDelta, ToolCallDelta,
                  TurnCompleted, TurnStarted, UsageError, tool)
from loop.errors import VerificationFailed
from provider import Function
from verifier import FunctionVerifier, NoSecrets, failed, passed

KEY = "AKIA" + "IOSFODNN7" + "EXAMPLE"  # AWS's documented example key, in pieces
CHUNKS = ["The museum ", "opens at ", "nine ", "on weekdays."]
ANSWER = "".join(CHUNKS)


def ask(text: str = "When does the museum open?") -> State:
    return State().append(Role.USER, Text(text))


def chunked(*answers: list[str]) -> Function:
    """Streams the ``n``-th answer in its chunks on the ``n``-th call (the last one again after that)."""
    calls = [0]

    async def model(request: Request) -> AsyncIterator[Delta]:
        chunks = answers[min(calls[0], len(answers) - 1)]
        calls[0] += 1
        for chunk in chunks:
            yield TextDelta(chunk)
            await anyio.lowlevel.checkpoint()
        yield Finish("stop")

    return Function(model)


class Gate:
    """An output check that waits until it is opened, noting what the subscriber had received by then."""

    def __init__(self, events: Subscription, verdict: bool = True) -> None:
        self.events = events
        self.verdict = verdict
        self.seen_before: list[Any] | None = None
        self.open = anyio.Event()
        self.called = anyio.Event()

    def verifier(self) -> FunctionVerifier:
        async def check(state: State) -> Any:
            self.seen_before = self.events.drain()
            self.called.set()
            await self.open.wait()
            return passed() if self.verdict else failed("The answer is not allowed here.")
        return FunctionVerifier(check, name="gate")


def texts(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def summary(events: list[Any]) -> list[Any]:
    """What a stream showed, comparable between two runs: each event's type, with the text of text deltas."""
    return [(type(e).__name__, e.text) if isinstance(e, TextDelta) else type(e).__name__ for e in events]


async def test_no_delta_of_the_answer_reaches_a_subscriber_before_the_checks_pass() -> None:
    step = Step(chunked(CHUNKS))
    with step.events.subscribe(buffer=None) as events:
        gate = Gate(events)
        agent = WithGuardrails(SingleShot(step), step, output=[gate.verifier()])
        async with anyio.create_task_group() as group:
            result: list[State] = []

            async def run() -> None:
                result.append(await agent.run(ask()))

            group.start_soon(run)
            await gate.called.wait()
            for _ in range(10):  # the run waits on the check: nothing is released meanwhile
                await anyio.lowlevel.checkpoint()
            assert events.drain() == []
            gate.open.set()
    assert gate.seen_before is not None
    assert not any(isinstance(e, TextDelta) for e in gate.seen_before)
    assert not any(isinstance(e, TurnCompleted) for e in gate.seen_before)
    released = events.drain()
    assert [e.text for e in released if isinstance(e, TextDelta)] == CHUNKS  # each chunk once, in order
    assert result[0].answer == ANSWER == texts(released)


async def test_released_stream_is_the_stream_without_hold_back() -> None:
    async def events_of(hold_back: bool) -> tuple[list[Any], State]:
        step = Step(chunked(CHUNKS))
        agent = WithGuardrails(SingleShot(step), step, output=[NoSecrets()], hold_back=hold_back)
        with step.events.subscribe(buffer=None) as events:
            state = await agent.run(ask())
            return events.drain(), state

    held, held_state = await events_of(True)
    plain, plain_state = await events_of(False)
    assert summary(held) == summary(plain)
    assert held_state.answer == plain_state.answer == ANSWER
    assert held_state.outcome is not None and held_state.outcome.data == plain_state.outcome.data  # type: ignore[union-attr]


async def test_on_a_trip_no_text_of_the_answer_ever_reaches_a_subscriber() -> None:
    step = Step(chunked(["Your key ", KEY, " works."]))
    agent = WithGuardrails(SingleShot(step), step, output=[NoSecrets()])
    with step.events.subscribe(buffer=None) as events, step.events.subscribe(buffer=None, stamped=True) as stamped:
        with pytest.raises(GuardrailTripped) as caught:
            await agent.run(ask())
        shown = events.drain()
        shown_stamped = stamped.drain()
    assert caught.value.stage == "output" and caught.value.check == "no-secrets"
    assert not any(isinstance(e, TextDelta) for e in shown)
    assert not any(isinstance(e, TurnCompleted) and e.turn.role is Role.ASSISTANT for e in shown)
    assert not any(KEY in repr(e) for e in shown + shown_stamped)
    # What shows no words of the answer still goes out: the turn began, and how it finished.
    assert any(isinstance(e, TurnStarted) for e in shown) and any(isinstance(e, Finish) for e in shown)


async def test_a_tripped_gate_seen_from_the_subscriber_side() -> None:
    step = Step(chunked(CHUNKS))
    with step.events.subscribe(buffer=None) as events:
        gate = Gate(events, verdict=False)
        gate.open.set()
        agent = WithGuardrails(SingleShot(step), step, output=[gate.verifier()])
        with pytest.raises(GuardrailTripped):
            await agent.run(ask())
        assert texts(gate.seen_before or []) == "" and texts(events.drain()) == ""


async def test_without_hold_back_the_answer_streams_before_the_checks_run() -> None:
    step = Step(chunked(CHUNKS))
    with step.events.subscribe(buffer=None) as events:
        gate = Gate(events)
        gate.open.set()
        agent = WithGuardrails(SingleShot(step), step, output=[gate.verifier()], hold_back=False)
        await agent.run(ask())
    assert texts(gate.seen_before or []) == ANSWER
    assert "hold_back=False" in repr(agent)


@tool
def opening_hours(day: str) -> str:
    """The museum's opening hours on a day."""
    return "9:00-17:00"


def looks_up() -> Function:
    """Says what it does and calls a tool, then answers in chunks."""

    async def model(request: Request) -> AsyncIterator[Delta]:
        if not request.turns[-1].tool_results:
            yield TextDelta("Let me look ")
            yield TextDelta("that up.")
            yield ToolCallDelta(0, "call_1", "opening_hours", '{"day": "monday"}')
            yield Finish("tool_calls")
            return
        for chunk in CHUNKS:
            yield TextDelta(chunk)
        yield Finish("stop")

    return Function(model)


async def test_the_text_of_a_turn_that_calls_a_tool_streams_before_the_checks() -> None:
    step = Step(looks_up(), tools=[opening_hours])
    with step.events.subscribe(buffer=None) as events:
        gate = Gate(events)
        gate.open.set()
        agent = WithGuardrails(ReAct(step), step, output=[gate.verifier()])
        state = await agent.run(ask())
        after = events.drain()
    before = gate.seen_before or []
    assert texts(before) == "Let me look that up."  # released when its call streamed: not the answer
    names = summary(before)
    assert names.index(("TextDelta", "that up.")) < names.index("ToolCallDelta") < names.index("ToolFinished")
    assert texts(after) == ANSWER == state.answer


async def test_drafts_a_repair_replaced_are_released_with_the_answer_in_order() -> None:
    step = Step(chunked(["Write to ", "ines@example.org."], CHUNKS))
    agent = WithGuardrails(SingleShot(step), step, output=[NoSecrets()],
                           repair=[FunctionVerifier(lambda s: "@" not in (s.answer or ""), name="no-at")])
    with step.events.subscribe(buffer=None) as events:
        state = await agent.run(ask())
        shown = events.drain()
    assert state.answer == ANSWER
    assert texts(shown) == "Write to ines@example.org." + ANSWER  # as without hold-back
    kinds = summary(shown)
    assert kinds.index(("TextDelta", "ines@example.org.")) < kinds.index(("TextDelta", CHUNKS[0]))


async def test_a_repair_that_never_passes_releases_no_text() -> None:
    step = Step(chunked(["Write to ines@example.org."]))
    agent = WithGuardrails(SingleShot(step), step, output=[NoSecrets()], max_retries=1,
                           repair=[FunctionVerifier(lambda s: "@" not in (s.answer or ""), name="no-at")])
    with step.events.subscribe(buffer=None) as events:
        with pytest.raises(VerificationFailed):
            await agent.run(ask())
        assert texts(events.drain()) == ""


async def test_an_interrupted_answer_is_never_released() -> None:
    started = anyio.Event()

    async def model(request: Request) -> AsyncIterator[Delta]:
        yield TextDelta("half an ")
        started.set()
        await anyio.sleep_forever()
        yield TextDelta("answer")

    step = Step(Function(model))
    agent = WithGuardrails(SingleShot(step), step, output=[NoSecrets()])
    with step.events.subscribe(buffer=None) as events:
        async with anyio.create_task_group() as group:
            group.start_soon(agent.run, ask())
            await started.wait()
            group.cancel_scope.cancel()
        assert texts(events.drain()) == ""
        assert not step.events._holds  # the hold came off the bus


async def test_released_events_keep_their_stamps_and_reach_main_line_subscribers() -> None:
    step = Step(chunked(CHUNKS))
    agent = WithGuardrails(SingleShot(step), step, output=[NoSecrets()])
    with step.events.subscribe(buffer=None, stamped=True) as stamped, \
            step.events.subscribe(buffer=None, main_line=True) as main:
        await agent.run(ask())
        deltas = [s for s in stamped.drain() if isinstance(s.event, TextDelta)]
        assert texts(main.drain()) == ANSWER
    assert [s.event.text for s in deltas] == CHUNKS
    assert {(s.path, s.main) for s in deltas} == {("WithGuardrails/SingleShot", True)}


async def test_an_outer_trip_drops_what_an_inner_guardrail_released() -> None:
    step = Step(chunked(["Your key ", KEY, " works."]))
    inner = WithGuardrails(SingleShot(step), step, output=[FunctionVerifier(lambda s: True, name="fine")])
    outer = WithGuardrails(inner, step, output=[NoSecrets()])
    with step.events.subscribe(buffer=None) as events:
        with pytest.raises(GuardrailTripped):
            await outer.run(ask())
        assert not any(KEY in repr(e) for e in events.drain())
        assert not step.events._holds


async def test_input_only_guardrails_hold_nothing_back() -> None:
    step = Step(chunked(CHUNKS))
    with step.events.subscribe(buffer=None) as events:
        gate = Gate(events)
        gate.open.set()
        agent = WithGuardrails(SingleShot(step), step, input=[NoSecrets()], repair=[gate.verifier()])
        await agent.run(ask())
    assert texts(gate.seen_before or []) == ANSWER  # repairs are not tripwires: the answer streams as written


def test_hold_back_must_be_a_bool() -> None:
    step = Step(chunked(CHUNKS))
    with pytest.raises(UsageError, match="hold_back is True"):
        WithGuardrails(SingleShot(step), step, output=[NoSecrets()], hold_back="yes")  # type: ignore[arg-type]
