"""The terminal conduit in-process: what a person sees for text, tools, reports, failures."""

import io

from cognitive import PatternKind
from cognitive import SingleShot, WithVerification, new_turn_processor
from loop import Role, Text, Turn, TurnCompleted, TurnExecutor, TurnKind
from provider import Function, Scripted
from session import Manager
from session._stdio import StdioConduit, _render
from verifier import FunctionVerifier


async def run_chat(lines: str, processor, provider) -> str:  # type: ignore[no-untyped-def]
    shown: list[str] = []
    conduit = StdioConduit(input=io.StringIO(lines), output=shown.append, handle_signals=False)
    async with Manager(processor, provider=provider) as manager:
        await conduit.serve(manager)
    return "".join(shown)


async def test_a_verification_report_is_shown_as_it_happens() -> None:
    def make(executor: TurnExecutor) -> WithVerification:
        check = FunctionVerifier(lambda s: "42" in (s.answer or ""), name="is-42")
        return WithVerification(SingleShot(executor), executor, verifiers=[check])

    out = await run_chat("question\n", new_turn_processor(make), Scripted(["41", "42"]))
    assert "41" in out and "[verification]" in out and "## is-42: FAIL" in out
    assert out.index("[verification]") < out.rindex("42")
    assert out.count("you> ") == 2


async def test_a_failure_is_shown_and_the_chat_goes_on() -> None:
    def model(request):  # type: ignore[no-untyped-def]
        if request.turns[-1].text == "boom":
            raise RuntimeError("model exploded")
        return "fine"

    out = await run_chat("boom\nagain\n", new_turn_processor(lambda e: SingleShot(e)), Function(model))
    assert "[error] RuntimeError: model exploded" in out
    assert out.rstrip().endswith("you>") and "fine" in out


async def test_blank_lines_are_ignored() -> None:
    out = await run_chat("\n   \nhi\n", new_turn_processor(lambda e: SingleShot(e)), Function(lambda r: "hello"))
    assert out.count("hello") == 1 and out.count("you> ") == 4


def test_a_report_is_recognised_by_its_kind_whether_written_as_a_turn_kind_or_stored_as_a_string() -> None:
    for kind in (TurnKind.VERIFICATION, "verification"):
        shown = _render(TurnCompleted(Turn(Role.SYSTEM, [Text("## is-42: FAIL")], {"kind": kind})))
        assert shown is not None and "[verification]" in shown and "## is-42: FAIL" in shown
    for meta in ({}, {"kind": PatternKind.BUDGET}, {"kind": "my_own"}):
        assert _render(TurnCompleted(Turn(Role.SYSTEM, [Text("a note")], meta))) is None
