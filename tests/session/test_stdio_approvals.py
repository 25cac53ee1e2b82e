"""Approving at the terminal: every call that needs approval asked about, y or n, from the chat's own input; the
run resumed (kept calls) or let go on (live ones) before the next prompt; end of input and Ctrl-C at a prompt;
and the person at the terminal as the caller every run sees."""

from __future__ import annotations

import getpass
import io
import queue
import signal
from collections.abc import Callable
from typing import Any, TextIO, cast

import anyio
import pytest

from cognitive import new_turn_processor, react_factory
from loop import Caller, Request, Role, RunContext, State, Text, ToolCall, Turn, UsageError, branch, tool
from provider import Function, tool_call
from session import Manager, MemoryStore, MessageFailed, step_factory
from session._stdio import StdioConduit, _arguments, _render, local_caller

paid: list[tuple[str, int, str]] = []
live_results: list[str] = []


@tool(needs_approval=True)
async def pay(to: str, amount: int, context: RunContext) -> str:
    """Pay someone."""
    paid.append((to, amount, "nobody" if context.caller is None else context.caller.id))
    return f"paid {to} {amount}"


@tool
async def whoami(context: RunContext) -> str:
    """Who is asking."""
    caller = context.caller
    return "nobody" if caller is None else f"{caller.id} in {caller.namespace}"


def model(request: Request) -> Any:
    """Pays Ada when asked to, Ada and Bob when asked to pay them, then reports what the tools said."""
    last = request.turns[-1]
    if last.role is Role.TOOL:
        return "result: " + "; ".join(r.content for r in last.tool_results)
    if "who" in last.text:
        return tool_call("whoami", {}, id="w1")
    ada = tool_call("pay", {"to": "Ada", "amount": 250}, id="p1")
    return ada if last.text == "pay Ada" else [ada, tool_call("pay", {"to": "Bob", "amount": 5}, id="p2")]


async def side_run(step: Any, state: State) -> State:
    """Runs the turn in a branch, whose calls cannot be kept in the conversation: they wait live."""
    with branch("side"):
        after = await step.turn(state)
    live_results.extend(r.content for r in after[-1].tool_results)
    return state


def manager(processor: Any = None, store: Any = None) -> Manager:
    return Manager(processor or new_turn_processor(react_factory), provider=Function(model),
                   make_step=step_factory([pay, whoami]), store=store)


ASK_ADA = 'approve pay({"to": "Ada", "amount": 250})? [y/N] '
ASK_BOB = 'approve pay({"to": "Bob", "amount": 5})? [y/N] '
DENIED = "error: the user denied this call: denied at the terminal"


@pytest.fixture(autouse=True)
def fresh() -> None:
    paid.clear()
    live_results.clear()


async def chat(lines: str, processor: Any = None, *, caller: Caller | None = None,
               before: Callable[[Manager], Any] | None = None) -> tuple[str, State]:
    """What the terminal showed for ``lines`` typed, and the conversation it left (session ``s1``)."""
    shown: list[str] = []
    conduit = StdioConduit(session_id="s1", input=io.StringIO(lines), output=shown.append, handle_signals=False,
                           caller=caller)
    async with manager(processor, MemoryStore()) as m:
        if before is not None:
            await before(m)
        await conduit.serve(m)
        state = (await m.open("s1")).state
    return "".join(shown), state


async def test_a_call_approved_at_the_prompt_runs_and_the_run_resumes_before_the_next_prompt() -> None:
    out, state = await chat("pay Ada\ny\n", caller=Caller("grace", "local"))
    assert paid == [("Ada", 250, "grace")]
    assert out.count(ASK_ADA) == 1 and "✓ approved pay" in out
    assert "[pending: waiting for approval: pay]" in out
    assert out.index("[pending:") < out.index(ASK_ADA) < out.index("result: paid Ada 250") < out.rindex("you> ")
    assert out.count("you> ") == 2 and out.endswith("you> \n")
    tool_turn = state[-2]
    assert tool_turn.meta["approvals"]["p1"] == {"approved": True, "reason": "", "by": "grace"}
    assert state.answer == "result: paid Ada 250"


async def test_anything_but_yes_denies_and_the_model_reads_the_denial() -> None:
    for answer in ("n", "", "sure"):
        paid.clear()
        out, state = await chat(f"pay Ada\n{answer}\n")
        assert paid == [] and "✗ denied pay: denied at the terminal" in out
        assert state.answer == f"result: {DENIED}"
    out, _ = await chat("pay Ada\n YES \n")
    assert paid and "✓ approved pay" in out


async def test_two_calls_of_one_turn_are_asked_together_and_answered_together() -> None:
    out, state = await chat("pay them\ny\nn\nwho am I?\n", caller=Caller("grace", "local"))
    assert [p[:2] for p in paid] == [("Ada", 250)]
    assert out.index(ASK_ADA) < out.index(ASK_BOB) < out.index("✓ approved pay") < out.index("✗ denied pay")
    assert "[approval] the run stopped at 2 calls needing your approval" in out
    assert "result: paid Ada 250; " + DENIED in out
    assert "result: grace in local" in out, "the line after the answers is the next message"
    assert out.count("you> ") == 3 and state.answer == "result: grace in local"


async def test_end_of_input_at_a_prompt_denies_the_rest_and_quits_once_the_run_has_ended() -> None:
    out, state = await chat("pay them\ny\n")
    assert [p[:2] for p in paid] == [("Ada", 250)]
    assert "✓ approved pay" in out and "✗ denied pay: denied at the terminal" in out
    assert state.answer == "result: paid Ada 250; " + DENIED
    assert out.index(ASK_BOB) < out.index("result: paid Ada") and out.count("you> ") == 1, "no prompt after it"
    tool_turn = state[-2]
    assert tool_turn.meta["approvals"]["p2"]["approved"] is False, "the denial is stored, not lost"


async def test_calls_left_waiting_before_the_chat_began_are_asked_first() -> None:
    async def leave_waiting(m: Manager) -> None:
        await (await m.open("s1")).ask("pay Ada")

    out, state = await chat("y\n", before=leave_waiting, caller=Caller("grace", "local"))
    assert [p[:2] for p in paid] == [("Ada", 250)] and state[-2].meta["approvals"]["p1"]["by"] == "grace"
    assert out.index(ASK_ADA) < out.index("result: paid Ada 250") < out.index("you> ")
    assert state.answer == "result: paid Ada 250"


async def test_a_call_made_in_a_branch_is_asked_while_its_message_runs() -> None:
    out, state = await chat("pay them\ny\nn\n", side_run, caller=Caller("grace", "local"))
    assert [p[:2] for p in paid] == [("Ada", 250)] and paid[0][2] == "grace"
    assert live_results == ["paid Ada 250", DENIED]
    assert "[approval] a running program waits on 2 calls needing your approval" in out
    assert out.index(ASK_BOB) < out.index("✓ approved pay") and "[pending" not in out
    assert out.count("you> ") == 2 and out.endswith("you> \n")


async def test_end_of_input_at_a_live_prompt_denies_and_the_message_ends_first() -> None:
    out, _ = await chat("pay them\n", side_run)
    assert paid == [] and live_results == [DENIED, DENIED]
    assert out.count("✗ denied pay: denied at the terminal") == 2 and out.count("you> ") == 1


async def test_a_tool_sees_the_local_user_as_its_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(getpass, "getuser", lambda: "ada")
    out, state = await chat("who am I?\npay Ada\ny\n")
    assert "result: ada in local" in out
    assert paid == [("Ada", 250, "ada")] and state[-2].meta["approvals"]["p1"]["by"] == "ada"


def test_the_local_caller_falls_back_to_local_when_the_system_cannot_name_the_user(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def nobody() -> str:
        raise OSError("No username set in the environment")

    monkeypatch.setattr(getpass, "getuser", nobody)
    assert local_caller() == Caller("local", "local")
    monkeypatch.setattr(getpass, "getuser", lambda: "")
    assert local_caller() == Caller("local", "local")
    with pytest.raises(UsageError, match="takes a loop.Caller"):
        StdioConduit(caller="ada")  # type: ignore[arg-type]


def test_arguments_show_as_json_on_one_line_cut_to_a_sensible_length() -> None:
    assert _arguments(ToolCall("c", "pay", '{\n  "to": "Åsa",\n  "amount": 5\n}')) == '{"to": "Åsa", "amount": 5}'
    assert _arguments(ToolCall("c", "pay", '{"to": \n"A')) == '{"to": "A'
    long = _arguments(ToolCall("c", "note", '{"text": "' + "x" * 1000 + '"}'))
    assert len(long) == 201 and long.endswith("…")


def test_a_guardrail_stop_names_the_check_its_stage_and_the_reason_on_one_line() -> None:
    tripped = {"check": "no-secrets", "stage": "output", "reason": "Found in the answer:\n\n- a key"}
    shown = _render(MessageFailed("m1", "the output guardrail tripped", "GuardrailTripped", tripped))
    assert shown == "\n  [blocked by guardrail no-secrets (output)] Found in the answer: - a key\n"
    assert _render(MessageFailed("m1", "boom", "RuntimeError")) == "\n  [error] RuntimeError: boom\n"


# -- a terminal typed at as it goes ----------------------------------------------------------------------------


class Typist:
    """A terminal's input typed as the test goes: ``readline`` waits for the next line (``hang_up``: the end)."""

    def __init__(self) -> None:
        self._lines: queue.Queue[str] = queue.Queue()

    def type(self, line: str) -> None:
        self._lines.put(line + "\n")

    def hang_up(self) -> None:
        self._lines.put("")

    def readline(self) -> str:
        return self._lines.get()


class Screen:
    """A terminal's output, waited on: ``shows`` returns once ``text`` has been written."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self._changed = anyio.Event()

    def write(self, text: str) -> None:
        self.written.append(text)
        self._changed.set()

    @property
    def text(self) -> str:
        return "".join(self.written)

    async def shows(self, text: str) -> None:
        with anyio.fail_after(5):
            while text not in self.text:
                self._changed = anyio.Event()
                await self._changed.wait()


async def at_a_terminal(processor: Any, act: Callable[[Typist, Screen], Any], *, store: Any = None,
                        ) -> tuple[str, tuple[Any, ...]]:
    """Chat with session ``s1`` while ``act`` types and reads the screen, then hang up: what was shown, and
    what still waits for approval."""
    typist, screen = Typist(), Screen()
    conduit = StdioConduit(session_id="s1", input=cast(TextIO, typist), output=screen.write)
    try:
        async with manager(processor, store) as m, anyio.create_task_group() as group:
            group.start_soon(conduit.serve, m)
            await act(typist, screen)
            typist.hang_up()
            waiting = (await m.open("s1")).pending_approvals()
    finally:
        typist.hang_up()
    return screen.text, waiting


async def test_a_request_of_a_message_the_chat_did_not_send_is_asked_at_the_prompt() -> None:
    store = MemoryStore()
    await store.post("s1", Turn(Role.USER, (Text("pay them"),), {"message_id": "m1"}))  # runs when s1 opens

    async def answer(typist: Typist, screen: Screen) -> None:
        await screen.shows(ASK_ADA)
        typist.type("n")
        await screen.shows(ASK_BOB)
        typist.type("y")
        await screen.shows("✓ approved pay")

    out, waiting = await at_a_terminal(side_run, answer, store=store)
    assert [p[:2] for p in paid] == [("Bob", 5)] and live_results == [DENIED, "paid Bob 5"] and waiting == ()
    assert out.count(ASK_ADA) == 1 and out.rstrip().endswith("you>")


# -- Ctrl-C at an approval prompt ----------------------------------------------------------------------------


async def ctrl_c_at_a_prompt(processor: Any) -> tuple[str, tuple[Any, ...]]:
    """Type a message, press Ctrl-C at the approval prompt it brings, hang up."""
    async def press_ctrl_c(typist: Typist, screen: Screen) -> None:
        typist.type("pay them")
        await screen.shows("[y/N]")
        signal.raise_signal(signal.SIGINT)
        await screen.shows("[interrupted]" if processor is side_run else "bye")

    return await at_a_terminal(processor, press_ctrl_c)


async def test_ctrl_c_at_a_live_prompt_interrupts_the_message_and_the_chat_goes_on() -> None:
    out, waiting = await ctrl_c_at_a_prompt(side_run)
    assert paid == [] and live_results == [] and waiting == ()
    assert out.index(ASK_ADA) < out.index("[interrupted]") < out.rindex("you> ") and "bye" not in out
    assert ASK_BOB not in out, "no question about a call nobody waits on any more"


async def test_ctrl_c_at_a_kept_prompt_quits_and_the_calls_keep_waiting() -> None:
    out, waiting = await ctrl_c_at_a_prompt(None)
    assert paid == [] and out.index(ASK_ADA) < out.index("bye")
    assert [[c.id for c in request.calls] for request in waiting] == [["p1", "p2"]]
