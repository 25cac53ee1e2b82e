"""The agent the chat page is tested against: an offline model (``provider.Function``) whose behaviour each test
picks with a word in its message, and a processor that runs the pattern the message asks for.

- ``add 2 and 3``: a ReAct run that calls the ``add`` tool, then answers.
- ``slowly``: an answer streamed in small pieces, a pause between them (``SLOW_ANSWER``).
- ``verify``: ``WithVerification(ReAct)``: the first answer fails the check, the second passes.
- ``vote``: ``SelfConsistency(ReAct, n=5)``: samples 2 and 4 answer differently from the others.
- ``nap``: calls the ``nap`` tool, which sleeps for a minute (to be interrupted).
- ``hostile``: calls ``echo`` with markup, which comes back in the result and the answer.
- ``pay``: calls ``pay``, which needs approval.
- ``forever``: keeps calling ``add`` until ``ReAct``'s turn cap makes it answer: a degraded answer.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import anyio

from cognitive import ReAct, SelfConsistency, WithVerification
from loop import Delta, Finish, Request, Role, State, TextDelta, TurnExecutor, Usage, UsageDelta, tool
from provider import Function, tool_call
from verifier import FunctionVerifier, failed, passed

HOSTILE = "<img src=x onerror=alert(1)>"
SLOW_ANSWER = "Once upon a time " + " ".join(f"word{i}" for i in range(24)) + " the end."
SLOW_PIECE = 8  # characters per streamed piece
SLOW_PAUSE = 0.04  # seconds between pieces
VOTES = {2: "The answer is 24.", 4: "The answer is 18."}  # sample number -> its (wrong) answer; others say 8


@tool
async def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
async def nap(seconds: float) -> str:
    """Sleep for a while."""
    await anyio.sleep(seconds)
    return "rested"


@tool
async def echo(text: str) -> str:
    """Say the text back."""
    return text


@tool(needs_approval=True)
async def pay(to: str, amount: int) -> str:
    """Pay someone."""
    return f"paid {to} {amount}"


TOOLS = [add, nap, echo, pay]


def _asked(request: Request) -> str:
    return next((t.text for t in reversed(request.turns) if t.role is Role.USER), "")


async def _slowly(text: str) -> AsyncIterator[Delta]:
    for start in range(0, len(text), SLOW_PIECE):
        yield TextDelta(text[start:start + SLOW_PIECE])
        await anyio.sleep(SLOW_PAUSE)
    yield UsageDelta(Usage(12, len(text) // 4))
    yield Finish("stop")


def model(request: Request) -> Any:
    """The offline model: it reads the last user message and what this run has done since."""
    asked = _asked(request)
    last = request.turns[-1]
    result = last.tool_results[0].content if last.role is Role.TOOL else None
    usage = Usage(20, 10)
    if "slowly" in asked:
        return _slowly(SLOW_ANSWER)
    if "vote" in asked:
        sample = re.search(r"sample (\d+)", request.path)
        return [VOTES.get(int(sample[1]) if sample else 0, "The answer is 8."), usage]
    if "verify" in asked:
        reported = any(t.role is Role.SYSTEM for t in request.turns)
        return ["The answer is 42.", usage] if reported else ["The answer is 41.", usage]
    if "nap" in asked:
        return [tool_call("nap", {"seconds": 60}), usage] if result is None else f"Woke up: {result}"
    if "hostile" in asked:
        return [tool_call("echo", {"text": HOSTILE}), usage] if result is None else f"It said {result}"
    if "pay" in asked:
        return [tool_call("pay", {"to": "Ada", "amount": 250}), usage] if result is None else f"Done: {result}"
    if "forever" in asked:
        tools_off = request.options.tool_choice == "none" or not request.tools
        return "I stopped counting." if tools_off else [tool_call("add", {"a": 1, "b": 1}), usage]
    if "add" in asked:
        numbers = [float(n) for n in re.findall(r"\d+", asked)]
        return [tool_call("add", {"a": numbers[0], "b": numbers[1]}), usage] if result is None \
            else [f"The sum is {result}.", usage]
    return "I only know a few tricks."


def provider() -> Function:
    return Function(model)


def _right(state: State) -> Any:
    return passed() if "42" in (state.answer or "") else failed("The answer must be 42; check it again.")


async def processor(step: TurnExecutor, state: State) -> State:
    """Runs the pattern the last message asks for."""
    asked = state.turns[-1].text if state.turns else ""
    if "verify" in asked:
        return await WithVerification(ReAct(step), step, verifiers=[FunctionVerifier(_right)], max_retries=2).run(state)
    if "vote" in asked:
        return await SelfConsistency(ReAct(step), n=5).run(state)
    if "forever" in asked:
        return await ReAct(step, max_turns=2).run(state)
    return await ReAct(step).run(state)
