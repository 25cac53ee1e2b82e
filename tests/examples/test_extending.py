"""The extending example: every piece passes its protocol's conformance check and works in the framework."""

import subprocess
import sys

import pytest

from examples.extending import DictStore, Dictionary, Shouter, Shouts, Twice
from loop import Role, State, Step, Text, ToolCall
from provider import Scripted
from provider.testing import ConformanceError, check_provider
from tests.examples import ROOT

ASKED = State().append(Role.USER, Text("say hi"))


def test_the_example_runs_as_a_user_runs_it() -> None:
    done = subprocess.run([sys.executable, "examples/extending.py"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "provider, tool, verifier, pattern and store pass their conformance checks"
    # The model called the Dictionary tool, answered from it, then improved that answer: not its prompt.
    assert lines[1] == ("answer: LOOP: A REPEATED SEQUENCE, AS THE DICTIONARY SAYS  (outcome ok, first try "
                        "{'first': 'LOOP: A REPEATED SEQUENCE'})")
    assert lines[2] == ("stored turns: ['keep this conversation', 'KEEP THIS CONVERSATION', 'Improve your "
                        "answer.', 'KEEP THIS CONVERSATION, AS THE DICTIONARY SAYS']")


async def test_the_provider_streams_words_and_a_broken_one_fails_its_check() -> None:
    state = await Step(Shouter()).turn(ASKED)
    assert state.answer == "SAY HI" and state.usage.output_tokens == 2

    class Silent:
        async def stream(self, request: object):  # type: ignore[no-untyped-def]
            return
            yield

    with pytest.raises(ConformanceError, match="carried no text"):
        await check_provider(Silent)


async def test_the_tool_answers_and_its_failure_is_an_error_result() -> None:
    step = Step(Scripted([[ToolCall("c1", "define", '{"word": "Loop"}'), ToolCall("c2", "define", '{"word": "x"}')]]),
                tools=[Dictionary({"loop": "a repeated sequence"})])
    state = await step.turn(ASKED)
    ok, missing = state.last.tool_results
    assert ok.content == "a repeated sequence" and not ok.is_error
    assert missing.is_error and "no definition of 'x'" in missing.content


async def test_the_pattern_and_verifier_compose() -> None:
    state = await Twice(Step(Scripted(["hello", "HELLO THERE"]))).run(ASKED)
    assert state.answer == "HELLO THERE" and state.outcome.data == {"Twice": {"first": "hello"}}
    assert (await Shouts().verify(state)).ok
    assert not (await Shouts().verify(state.append(Role.ASSISTANT, Text("quiet")))).ok


async def test_the_store_keeps_and_rewinds() -> None:
    store = DictStore()
    await store.append("s", 0, ASKED.turns, {"k": 1})
    loaded = await store.load("s")
    assert loaded is not None and loaded.turns == ASKED.turns and loaded.meta == {"k": 1}
    assert await store.load("unknown") is None
