"""The main line of a conversation: which turns are the session's to store, and how a failed message is recorded."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import anyio

from cognitive import GuardrailTripped
from loop import Role, State, Text, ToolResult, Turn, Wake, tracing
from session._events import StorePaused, TurnStored, TurnUpdated
from session.stores._memory import MemoryStore
from session.stores._protocol import StoreConflict, StoreError

if TYPE_CHECKING:
    from session._session import Session

_log = tracing.logger("session")
FAILURE = "failure"
"""The ``kind`` of the assistant turn a session stores in place of the answer when a message's run failed."""


def extends(state: State, base: State) -> bool:
    """Whether ``state`` holds every turn of ``base`` first, meta included, except that an answer there may
    since have been given an outcome (a wrapper records it on the stored answer turn)."""
    size = len(base)
    if len(state) < size:
        return False
    shared = state.common_prefix(base)
    if shared == size:
        return True  # the usual case: the same turns, found by identity
    mine = state.prefix(size).turns[shared:]
    return all(a == b and _sans_outcome(a.meta) == _sans_outcome(b.meta) for a, b in zip(mine, base.turns[shared:]))


def _sans_outcome(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    return {k: v for k, v in meta.items() if k != "outcome"} if "outcome" in meta else meta


def describe(value: object) -> str:
    return repr(value) if isinstance(value, State) else f"{type(value).__name__} {value!r}"[:200]



class WriteLock:
    """A FIFO lock over one session's store writes, made of a flag while uncontended (the usual case): take it
    by setting ``held`` when it is not held, else by awaiting ``wait``; ``release`` it in either case.
    Measured: an uncontended anyio.Lock costs 5.8 µs per acquire and release (it yields to the event loop)
    against 0.02 µs for the flag, and a message writes two to four times."""

    __slots__ = ("_waiters", "held")

    def __init__(self) -> None:
        self.held = False
        self._waiters: deque[Wake] | None = None

    async def wait(self) -> None:
        """Wait until the writes under way or queued before this one are done; this one then holds the lock."""
        waiter = Wake()
        if self._waiters is None:
            self._waiters = deque()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.is_set():
                self.release()  # the lock was handed over just as this write was cancelled: pass it on
            else:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        waiters = self._waiters
        if waiters:
            waiters.popleft().set()  # hand over to the next write in line (FIFO); ``held`` stays set
        else:
            self.held = False


async def record_failure(session: Session, exc: Exception, message_id: str) -> None:
    """Store how a message of ``session`` failed (see ``failed_conversation``)."""
    failed = failed_conversation(session.state, exc, message_id)
    if failed is not None:
        try:
            # an answer a guardrail stopped is rewritten in the store, never kept there as it was written
            await session._persist(failed, rewind=isinstance(exc, GuardrailTripped))
        except Exception as error:  # the store is what failed: the message's own failure is reported anyway
            _log.warning("could not store a failed message's outcome", session=session.id, error=repr(error))


def failed_conversation(stored: State, exc: Exception, message_id: str) -> State | None:
    """The conversation to store for message ``message_id`` whose run raised ``exc``: the outcome ``failed``
    on an answer the failed run carries (a verification that never passed), else on a short assistant turn
    saying the run failed, so the conversation records it and stays valid to send to a model (open tool calls
    are answered first). ``None`` when the message's own turn never reached the store: nothing to record."""
    reason = f"{type(exc).__name__}: {exc}"[:2000]
    carried = getattr(exc, "state", None)
    base = carried if isinstance(carried, State) and extends(carried, stored) else stored
    if isinstance(exc, GuardrailTripped) and exc.stage == "output" and base is carried:
        base = _blocked(base, exc)
    asked = next((t for t in base.reversed() if t.role is Role.USER or "message_id" in t.meta), None)
    if asked is None or asked.meta.get("message_id") != message_id:
        return None
    last = base.last
    if last is None or base.outcome is not None or last.role is not Role.ASSISTANT or base.pending_calls:
        pending = base.pending_calls
        if pending:
            base = base.append(Role.TOOL, *(ToolResult(c.id, c.name, "error: not run: the run failed", is_error=True)
                                            for c in pending))
        if last is None or last.role is not Role.ASSISTANT or pending:
            base = base.append(Role.ASSISTANT, Text(f"(no answer: the run failed with {reason})"),
                               meta={"kind": FAILURE})
    return base.with_outcome("failed", reason, path="")


def _blocked(state: State, tripped: GuardrailTripped) -> State:
    """``state`` with the answer an output guardrail stopped replaced by a note saying so: that answer was
    stored as it was written, and is never to be shown (its outcome, ``failed``, stays on the note)."""
    last = state.last
    if last is None or last.role is not Role.ASSISTANT:
        return state
    note = Turn(Role.ASSISTANT, (Text(f"({tripped.notice})"),), {**last.meta, "kind": FAILURE})
    return state.prefix(len(state) - 1).append_turn(note)


FIRST_PAUSE = 0.5
"""Seconds a message waits after the store first failed under it; each failure doubles it, up to ``MAX_PAUSE``."""
MAX_PAUSE = 30.0


def store_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is the store failing to write (a full disk, a lost database), which passes, rather than a
    conflict, which retrying would repeat."""
    return isinstance(exc, StoreError) and not isinstance(exc, StoreConflict)


async def pause(session: Session, item: Any, attempt: int, base: State) -> None:
    """The store failed under ``item``, a posted message, for the ``attempt``-th time: say so, wait (longer each
    time), and take back what the cut-short run stored past ``base``, so the message runs again from its start.
    Messages queued behind it wait: order is kept, and nothing acknowledged is reported failed."""
    delay = min(MAX_PAUSE, FIRST_PAUSE * 2 ** (attempt - 1))
    _log.warning("the store failed: the message waits and runs again", session=session.id, message=item.id,
                 error=session.store_failing, attempt=attempt, retry_in=delay)
    session.events.publish(StorePaused(item.id, session.store_failing or "", delay, attempt))
    await anyio.sleep(delay)
    try:
        await session._persist(base, rewind=True)
    except Exception as exc:  # still failing: the next attempt finds out and waits again
        _log.info("the store still fails", session=session.id, error=repr(exc))


def _written(state: State, stored: State, held: int, common: int, rewind: bool) -> list[Turn] | None:
    """The turns the write of ``state`` over ``stored`` (``held`` turns, the first ``common`` shared) writes from
    ``common`` on; ``None`` when there is nothing to write: ``state`` is what is stored, or it does not extend it
    (and is not a ``rewind``)."""
    if common != held and not rewind and not extends(state, stored):
        return None  # not this conversation
    size = len(state)
    if size - common == 1:
        return [cast(Turn, state.last)]  # the usual case: one turn more (so state has a last turn)
    if common == size == held and state.meta == stored.meta:
        return None
    new = list(itertools.islice(state.reversed(), size - common))
    new.reverse()
    return new


def _now_stored(session: Session, state: State, held: int, common: int, new: list[Turn]) -> None:
    """``state`` is stored: it is the conversation now, and its new turns are published (those below ``held``,
    the turns stored before, as rewritten)."""
    session._stored = state
    events = session.events
    if events.has_subscribers:
        for index, turn in enumerate(new, common):
            events.publish(TurnUpdated(index, turn) if index < held else TurnStored(index, turn))


def write_now(session: Session, store: MemoryStore, state: State, *, rewind: bool = False) -> None:
    """``persist`` on a store whose writes never suspend (a ``MemoryStore``'s ``append_now``): no coroutine,
    no lock (no other write can start while this one runs), no shield (nothing can interrupt it)."""
    stored = session._stored
    if state is stored:
        return
    held = len(stored)
    turn = state.added_to(stored)
    if turn is not None:  # the usual case, each turn written as it completes: one turn more, stored at ``held``
        store.append_now(session.id, held, (turn,), state.meta)
        session._stored = state
        events = session.events
        if events.has_subscribers:
            events.publish(TurnStored(held, turn))
        return
    common = state.common_prefix(stored)
    new = _written(state, stored, held, common, rewind)
    if new is not None:
        store.append_now(session.id, common, new, state.meta)
        _now_stored(session, state, held, common, new)


async def persist(session: Session, state: State, *, rewind: bool = False) -> None:
    """Write what ``state`` adds to ``session``'s stored conversation (an outcome written on the stored answer
    rewrites that turn, published as ``TurnUpdated``). A state that does not extend it is not this conversation
    and is not written, unless ``rewind``: a processor's result replaces what its abandoned drafts left stored."""
    if state is session._stored:
        return  # the common case after a processor returns: everything is stored already
    if not rewind and not extends(state, session._stored):
        return
    lock = session._write_lock
    if lock.held:
        await lock.wait()  # another write of this session (a concurrent turn) is under way
    else:
        lock.held = True
    try:
        stored = session._stored
        held = len(stored)
        common = state.common_prefix(stored)
        new = _written(state, stored, held, common, True)
        if new is None:
            return
        # A write that has started always finishes: an interrupt landing mid-write must not lose a turn
        # whose message the caller was told was accepted.
        with anyio.CancelScope(shield=True):
            await session.store.append(session.id, common, new, state.meta)
        _now_stored(session, state, held, common, new)
    finally:
        lock.release()
