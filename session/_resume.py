"""Taking up a conversation where a stopped process left it: messages waiting in its inbox, tool calls left open.

A process can stop at any point of a message: before it started (the message waits in the store's inbox), in
the middle (its user turn and some turns are stored, maybe an assistant turn whose tool calls never got
results), or after its last turn was stored but before it was marked done. ``resume`` puts each case right,
so that every accepted message runs, in order, and its turns appear exactly once:

- a waiting message that never started is run;
- the waiting message that was cut short (its user turn is the conversation's latest message) is run again
  from its start: the conversation moves back to just before its user turn, so the unfinished attempt stops
  being part of it (``SQLiteStore`` keeps its rows as a record). Tools it called ran then and run again now;
- a waiting message followed by a later one in the conversation had finished: only its mark was lost;
- tool calls left open by a message that is not run again are answered "interrupted", as an interrupt
  answers them "cancelled", so the history is valid to show and to send to a model.
"""

from __future__ import annotations

from collections.abc import Iterable

import anyio
import attrs

from loop import Role, State, ToolResult, Turn, tracing
from session.stores._protocol import InboxStore, Store, StoreError

INTERRUPTED = "interrupted: the process stopped before this tool call finished"
_log = tracing.logger("session")


def answer_open_calls(state: State) -> State:
    """``state`` with the tool calls its last assistant turn left without results answered "interrupted"; the
    same state when none are open, or when they were left open on purpose, for the caller to answer (the
    answer's outcome ``pending``)."""
    pending = state.pending_calls
    outcome = state.outcome
    if not pending or (outcome is not None and outcome.status == "pending"):
        return state
    return state.append(Role.TOOL, *(ToolResult(c.id, c.name, f"error: {INTERRUPTED}", is_error=True)
                                     for c in pending))


@attrs.frozen
class Resumed:
    """A conversation as a session takes it up: the conversation (``None`` when nothing is stored), the
    messages to run first, oldest first, and the ids of waiting messages that had in fact finished. Tool
    calls left open in ``state`` are not answered yet."""

    state: State | None
    waiting: tuple[Turn, ...] = ()
    finished: tuple[str, ...] = ()


def resumed(state: State | None, waiting: tuple[Turn, ...]) -> Resumed:
    """How to take up conversation ``state`` with ``waiting`` in its inbox (see the module's docstring)."""
    if state is None:
        return Resumed(None, waiting)
    started: dict[str, int] = {}  # the message ids of the conversation's user turns, at their index
    latest = None
    if waiting:
        for at, turn in enumerate(state):
            message_id = turn.meta.get("message_id") if turn.role is Role.USER else None
            if isinstance(message_id, str):
                started[message_id] = at
                latest = message_id
    run: list[Turn] = []
    finished: list[str] = []
    for message in waiting:
        message_id = message.meta["message_id"]
        index = started.get(message_id)
        if index is None:
            run.append(message)
        elif message_id == latest:
            state = state.prefix(index)  # cut short: run it again from its start
            run.append(message)
        else:
            finished.append(message_id)
    return Resumed(state, tuple(run), tuple(finished))


async def history_of(store: Store, session_id: str) -> State | None:
    """The conversation ``session_id`` as it will be once resumed (nothing is written)."""
    state = await store.load(session_id)
    if state is None:
        return None
    waiting = await store.inbox(session_id) if isinstance(store, InboxStore) else ()
    taken = resumed(state, waiting).state
    return None if taken is None else answer_open_calls(taken)


async def resume(store: Store, session_id: str) -> Resumed:
    """Put conversation ``session_id``'s inbox right in ``store``, and say how the conversation stands (see
    the module's docstring; tool calls left open are answered by the session's worker as it starts)."""
    stored = await store.load(session_id)
    waiting = await store.inbox(session_id) if isinstance(store, InboxStore) else ()
    taken = resumed(stored, waiting)
    state = taken.state
    if stored is not None and state is not None and state is not stored:
        common = state.common_prefix(stored)
        await store.append(session_id, common, state.turns[common:], state.meta)
    if isinstance(store, InboxStore):
        for message_id in taken.finished:
            await store.done(session_id, message_id)
    return taken


async def mark_done(inbox: InboxStore, session_id: str, message_ids: Iterable[str]) -> None:
    """Take messages that ended (ran, failed, or were dropped) out of the inbox for good. A store failure is
    logged, not raised: the message has ended all the same, and resuming runs it again only if it was the
    latest."""
    with anyio.CancelScope(shield=True):  # a message that ended must not run again after a restart
        for message_id in message_ids:
            try:
                await inbox.done(session_id, message_id)
            except StoreError as exc:
                _log.warning("could not mark a message done: resuming the session may run it again",
                             session=session_id, message=message_id, error=repr(exc))
