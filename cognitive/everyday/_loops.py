"""Noticing a tool loop: the same call made again and again, the usual way a run burns its budget."""

from __future__ import annotations

from cognitive.context._exchanges import call_key
from loop import Role, State, Turn

NOTE = ("You already made the exact call {name} with these arguments earlier in this run, and its result is "
        "above. Use it instead of asking again; if it is not enough, try something different. Another repeat "
        "will end the run.")


def watch(state: State, seen: dict[tuple[str, str], int]) -> tuple[str | None, str | None]:
    """Count the calls answered by ``state``'s last turn (a ``TOOL`` turn) in ``seen`` (keyed by ``call_key``,
    loosely). Returns the note to show the model after a call's first repeat, and what a further repeat returns
    instead: the reason to stop. The conversation is never rewritten: the note is a turn of its own."""
    results = state.last.tool_results if state.last is not None else ()
    calls = {c.id: c for t in _asking_turn(state) for c in t.tool_calls}
    repeated: list[str] = []
    for result in results:
        call = calls.get(result.call_id)
        if call is None:
            continue
        key = call_key(call, loose=True)
        count = seen.get(key, 0) + 1
        seen[key] = count
        if count > 2:
            return None, f"{call.name} was called {count} times with the same arguments"
        if count == 2:
            repeated.append(call.name)
    if not repeated:
        return None, None
    return " ".join(NOTE.format(name=name) for name in dict.fromkeys(repeated)), None


def _asking_turn(state: State) -> tuple[Turn, ...]:
    """The assistant turn whose calls ``state``'s last turn answers."""
    for turn in state.reversed():
        if turn.role is Role.ASSISTANT:
            return (turn,)
    return ()
