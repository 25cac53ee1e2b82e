"""Noticing a tool loop: the same call made again and again, the usual way a run burns its budget."""

from __future__ import annotations

import json
from typing import Any

from loop import Role, State, ToolCall, ToolResult, Turn

NOTE = ("\n\n[note: you already made this exact call ({name} with these arguments) earlier in this run and got "
        "this result. Use it instead of asking again; if it is not enough, try something different. Another "
        "repeat will end the run.]")


def call_key(call: ToolCall) -> str:
    """What makes two calls the same call: the tool's name and its arguments parsed, with keys sorted and
    strings compared without regard to case or runs of whitespace. Unparseable arguments compare as
    written, with whitespace collapsed."""
    try:
        arguments: Any = _normalise(json.loads(call.arguments or "{}"))
        text = json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        text = " ".join(call.arguments.split())
    return f"{call.name}\x00{text}"


def _normalise(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    if isinstance(value, dict):
        return {key: _normalise(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalise(item) for item in value]
    return value


def watch(state: State, seen: dict[str, int]) -> tuple[State, str | None]:
    """Count the calls answered by ``state``'s last turn (a ``TOOL`` turn) in ``seen``. A call's first repeat
    gets ``NOTE`` added to its result; what a further repeat returns instead is the reason to stop."""
    results = state.last.tool_results if state.last is not None else ()
    calls = {c.id: c for t in _asking_turn(state) for c in t.tool_calls}
    noted: dict[str, str] = {}
    for result in results:
        call = calls.get(result.call_id)
        if call is None:
            continue
        key = call_key(call)
        count = seen.get(key, 0) + 1
        seen[key] = count
        if count > 2:
            return state, f"{call.name} was called {count} times with the same arguments"
        if count == 2:
            noted[result.call_id] = NOTE.format(name=call.name)
    if not noted:
        return state, None
    last = state.last
    assert last is not None  # results came from it
    rewritten = tuple(ToolResult(r.call_id, r.name, r.content + noted[r.call_id], r.is_error)
                      if isinstance(r, ToolResult) and r.call_id in noted else r for r in last.parts)
    # The tool turn is this run's own, just made: it is replaced before anyone reads it back.
    return state.prefix(len(state) - 1).append_turn(Turn(Role.TOOL, rewritten, last.meta)), None


def _asking_turn(state: State) -> tuple[Turn, ...]:
    """The assistant turn whose calls ``state``'s last turn answers."""
    for turn in state.reversed():
        if turn.role is Role.ASSISTANT:
            return (turn,)
    return ()
