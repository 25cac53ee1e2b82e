"""Conversations for the context-view tests: builders, random histories, and a check that a provider would
accept what a view shows."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from loop import Role, State, Text, ToolCall, ToolResult, Turn


def ask(text: str = "question", system: str | None = "You are helpful.") -> State:
    state = State()
    if system is not None:
        state = state.append(Role.SYSTEM, Text(system))
    return state.append(Role.USER, Text(text))


def exchange(state: State, call_id: str, name: str, args: dict[str, Any] | str, result: str, *,
             error: bool = False, text: str = "") -> State:
    """``state`` with one assistant turn calling ``name`` and the tool turn answering it."""
    raw = args if isinstance(args, str) else json.dumps(args)
    parts: list[Any] = [Text(text)] if text else []
    state = state.append(Role.ASSISTANT, *parts, ToolCall(call_id, name, raw))
    return state.append(Role.TOOL, ToolResult(call_id, name, result, is_error=error))


def chain(steps: int, *, result_chars: int = 20, system: str | None = "You are helpful.") -> State:
    """A task then ``steps`` exchanges, each calling ``lookup`` with a new key."""
    state = ask("Follow the chain.", system)
    for i in range(steps):
        state = exchange(state, f"c{i}", "lookup", {"key": f"k{i}"}, f"value {i} ".ljust(result_chars, "."))
    return state


def sendable_problem(turns: Sequence[Turn]) -> str | None:
    """Why a provider would refuse ``turns`` (a result with no call right before it, a call with no result after
    it, unless it is the last turn), or ``None``."""
    open_calls: set[str] = set()
    expecting = False  # inside the results of the last assistant turn that called tools
    for index, turn in enumerate(turns):
        if turn.role is Role.TOOL:
            if not expecting:
                return f"turn {index}: tool results with no calls right before them"
            for result in turn.tool_results:
                if result.call_id not in open_calls:
                    return f"turn {index}: a result for {result.call_id!r}, which was not called just before"
                open_calls.discard(result.call_id)
            continue
        if open_calls:
            if all(t.role is Role.SYSTEM for t in turns[index:]):
                return None  # the calls the model made last, not answered yet (notes after them aside)
            return f"turn {index}: calls {sorted(open_calls)} have no results"
        expecting = False
        if turn.role is Role.ASSISTANT and turn.tool_calls:
            open_calls = {c.id for c in turn.tool_calls}
            expecting = True
    return None


def random_history(rng: random.Random, *, broken: bool = False) -> State:
    """A conversation of system turns, user messages, answers and tool exchanges (some with several calls, some
    repeated, some failed, some long); it may end in an open exchange. With ``broken``, stored history that no
    provider accepts is mixed in: a stray tool turn, or an exchange whose calls were never answered."""
    state = State()
    if rng.random() < 0.8:
        state = state.append(Role.SYSTEM, Text("instructions " * rng.randint(1, 20)))
    state = state.append(Role.USER, Text("task " * rng.randint(1, 30)))
    ids = iter(range(10_000))
    for _ in range(rng.randint(0, 25)):
        roll = rng.random()
        if roll < 0.55:
            calls = [ToolCall(f"c{next(ids)}", rng.choice(["search", "lookup", "read"]),
                              json.dumps({"q": rng.randint(0, 4)})) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
            state = state.append(Role.ASSISTANT, *([Text("let me look")] if rng.random() < 0.3 else []), *calls)
            if broken and rng.random() < 0.1:
                continue  # never answered
            state = state.append(Role.TOOL, *(ToolResult(c.id, c.name, "r" * rng.choice([5, 50, 3000]),
                                                         is_error=rng.random() < 0.1) for c in calls))
        elif roll < 0.7:
            state = state.append(Role.ASSISTANT, Text("an answer " * rng.randint(1, 10)))
        elif roll < 0.85:
            state = state.append(Role.USER, Text("another question " * rng.randint(1, 10)))
        elif roll < 0.95:
            state = state.append(Role.SYSTEM, Text("a note"))
        elif broken and state.last is not None and (state.last.role is Role.USER or (
                state.last.role is Role.ASSISTANT and not state.last.tool_calls)):
            state = state.append(Role.TOOL, ToolResult("nobody", "search", "stray"))
    if rng.random() < 0.15:
        state = state.append(Role.ASSISTANT, ToolCall(f"c{next(ids)}", "search", "{}"))
    return state
