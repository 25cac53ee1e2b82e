"""``State``: an immutable conversation with O(1) append and fork.

Turns live in a persistent singly linked list: appending makes one node that points at the old last node, so
every state made from the same prefix shares it. Forking a thousand branches from one state costs a thousand
nodes, not a thousand copies of the history.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from loop.checks import non_negative_int
from loop._outcome import DEGRADED, META_KEY, OK, STATUSES, Outcome, outcome_of_meta, split_old_meta
from loop._parts import Part, Role, ToolCall, ToolResult, Usage
from loop._turn import EMPTY, Turn
from loop._scope import run_path
from loop.errors import UsageError

FORMAT_VERSION = 2
_READS = (1, 2)  # version 1 kept run results in the state's meta; they are moved onto the answer turn
_ZERO = Usage()
_new = object.__new__
# The roles the readers below compare with on every turn: a module's global is read several times faster than an
# enum's member (Python 3.11 looks a member up through the enum's metaclass).
_ASSISTANT, _USER = Role.ASSISTANT, Role.USER


class _Node:
    """One turn and a link to the turns before it; ``usage`` is the running total up to and including it."""

    __slots__ = ("turn", "prev", "size", "usage", "turns")

    def __init__(self, turn: Turn, prev: _Node | None) -> None:
        self.turn = turn
        self.prev = prev
        self.size: int = 1 if prev is None else prev.size + 1
        running = _ZERO if prev is None else prev.usage
        for part in turn.parts:  # ``turn.usage`` added on, without the property's call: a node per turn
            if type(part) is Usage:
                running = running + part
        self.usage: Usage = running
        self.turns: tuple[Turn, ...] | None = None  # filled on first read of State.turns


class State:
    """The whole conversation plus run metadata. Immutable: every change returns a new ``State``.

    ``State()`` is empty. ``append`` and ``with_meta`` are O(1) and share everything with the original, so a
    state can be forked into any number of branches cheaply.
    """

    __slots__ = ("_node", "_meta")

    def __init__(self, turns: tuple[Turn, ...] | list[Turn] = (), meta: Mapping[str, Any] | None = None) -> None:
        node = None
        for turn in turns:
            if not isinstance(turn, Turn):
                raise UsageError(f"State turns must be Turn values, got {turn!r}")
            node = _Node(turn, node)
        self._node = node
        self._meta = _freeze(meta)

    @classmethod
    def _make(cls, node: _Node | None, meta: Mapping[str, Any]) -> State:
        state = object.__new__(cls)
        state._node = node
        state._meta = meta
        return state

    # -- growing ------------------------------------------------------------------------------------------

    def append(
        self, role: Role | str, *parts: Part, meta: Mapping[str, Any] | None = None, name: str | None = None
    ) -> State:
        """A new state with one more turn spoken by ``role`` (``name`` says who, among several speakers)."""
        turn = Turn(role, parts, meta or EMPTY) if name is None else Turn(role, parts, meta or EMPTY, name)
        return State._make(_Node(turn, self._node), self._meta)

    def append_turn(self, turn: Turn) -> State:
        """A new state with ``turn`` added at the end."""
        if type(turn) is not Turn and not isinstance(turn, Turn):
            raise UsageError(f"append_turn takes a Turn, got {turn!r}")
        state = _new(State)  # ``_make``, inline: every turn of every step is appended here
        state._node = _Node(turn, self._node)
        state._meta = self._meta
        return state

    def with_meta(self, updates: Mapping[str, Any] | None = None, /, **more: Any) -> State:
        """A new state whose ``meta`` has ``updates`` merged in; a value of ``None`` removes the key."""
        merged = dict(self._meta)
        for source in (updates or {}, more):
            for key, value in source.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
        return State._make(self._node, _freeze(merged))

    def with_outcome(
        self, status: str = OK, reason: str = "", *, data: Any = None, path: str | None = None
    ) -> State:
        """A new state whose answer turn (the last assistant turn) records how the run ended.

        ``data`` is kept under ``path`` (by default the current run path, see ``loop.run_path``). An outcome
        already on that turn composes with this one: the worse status wins and both sets of data are kept,
        so a wrapper never reports better than the run it wraps. Raises ``UsageError`` when there is no
        answer to record it on (no assistant turn, or a user turn after the last one).
        """
        if status not in STATUSES or not isinstance(reason, str):
            Outcome(status, reason)  # raises the UsageError that names the problem
        trailing: list[Turn] = []
        node = self._node
        while node is not None and node.turn.role is not Role.ASSISTANT:
            if node.turn.role is Role.USER:
                raise UsageError("cannot record an outcome: a user turn follows the last answer, so this run "
                                 "wrote no answer yet")
            trailing.append(node.turn)
            node = node.prev
        if node is None:
            raise UsageError("cannot record an outcome: the state holds no assistant turn (no answer)")
        turn = node.turn
        keyed = None if data is None else {run_path() if path is None else path: data}
        existing = outcome_of_meta(turn.meta)
        if existing is None:  # the usual case, written directly as the stored form
            record: dict[str, Any] = {"status": status}
            if reason and status != OK:
                record["reason"] = reason
            if keyed:
                record["data"] = keyed
        else:
            record = existing.worse(Outcome(status, reason, keyed)).to_dict()
        new = _Node(Turn(turn.role, turn.parts, {**turn.meta, META_KEY: record}, turn.name), node.prev)
        for later in reversed(trailing):
            new = _Node(later, new)
        return State._make(new, self._meta)

    def without_outcome(self) -> State:
        """A new state whose answer turn (the last assistant turn) records no outcome: for a run that goes on
        from a turn marked ``pending`` (its calls left open), once someone answers them. The same state when
        that turn records none."""
        trailing: list[Turn] = []
        node = self._node
        while node is not None and node.turn.role is not Role.ASSISTANT:
            trailing.append(node.turn)
            node = node.prev
        if node is None or META_KEY not in node.turn.meta:
            return self
        turn = node.turn
        new = _Node(Turn(turn.role, turn.parts, {k: v for k, v in turn.meta.items() if k != META_KEY}, turn.name),
                    node.prev)
        for later in reversed(trailing):
            new = _Node(later, new)
        return State._make(new, self._meta)

    def degrade(self, reason: str) -> State:
        """``with_outcome("degraded", reason)``: the answer was written after a budget or cap stopped the run."""
        return self.with_outcome(DEGRADED, reason)

    # -- reading ------------------------------------------------------------------------------------------

    @property
    def turns(self) -> tuple[Turn, ...]:
        """Every turn, oldest first. Built once per state and cached."""
        node = self._node
        if node is None:
            return ()
        if node.turns is None:
            # The usual case: two turns past the state a step last sent (its answer, and the tool results or the
            # next message). The cache moves here.
            prev = node.prev
            back = None if prev is None else prev.prev
            if back is not None and back.turns is not None and prev is not None and prev.turns is None:
                turns = node.turns = back.turns + (prev.turn, node.turn)
                back.turns = None
                return turns
            # Take over the nearest cached prefix so reading every step of a growing chat stays linear in
            # time, and move (not copy) the cache so memory stays linear too.
            tail: list[Turn] = []
            cursor: _Node | None = node
            while cursor is not None and cursor.turns is None:
                tail.append(cursor.turn)
                cursor = cursor.prev
            tail.reverse()
            prefix: tuple[Turn, ...] = ()
            if cursor is not None and cursor.turns is not None:  # the loop stopped at a cached prefix
                prefix, cursor.turns = cursor.turns, None
            node.turns = prefix + tuple(tail)
        return node.turns

    def __len__(self) -> int:
        return 0 if self._node is None else self._node.size

    def __iter__(self) -> Iterator[Turn]:
        return iter(self.turns)

    def __bool__(self) -> bool:
        return self._node is not None

    def __getitem__(self, index: int) -> Turn:
        return self.turns[index]

    def reversed(self) -> Iterator[Turn]:
        """Turns newest first, without building the whole tuple."""
        node = self._node
        while node is not None:
            yield node.turn
            node = node.prev

    def prefix(self, count: int) -> State:
        """The state holding only the first ``count`` turns (same meta); O(turns dropped)."""
        non_negative_int("prefix's turn count", count)
        node = self._node
        while node is not None and node.size > count:
            node = node.prev
        return State._make(node, self._meta)

    def added_to(self, base: State) -> Turn | None:
        """The one turn this state adds to ``base``, when it is ``base`` with one turn appended (sharing its
        turns, as ``base.append(...)`` makes it); ``None`` otherwise. The cheap test of a conversation that grew
        by a turn, such as a recorder writing each turn as it completes makes."""
        node = self._node
        return node.turn if node is not None and node.prev is base._node else None

    def common_prefix(self, other: State, *, meta: bool = True) -> int:
        """How many leading turns this state and ``other`` have in common.

        Forks of one state share their prefix as the same objects, found in time proportional to how far
        the two have diverged; turns that are merely equal (say, a state read back from a store) are
        compared by value over the part not shared, and by their meta too unless ``meta=False``.
        """
        a, b = self._node, other._node
        if a is not None and a.prev is b:
            return 0 if b is None else b.size  # the usual case: one turn appended to ``other``
        ours: list[Turn] = []
        theirs: list[Turn] = []
        while a is not None and (b is None or a.size > b.size):
            ours.append(a.turn)
            a = a.prev
        while b is not None and (a is None or b.size > a.size):
            theirs.append(b.turn)
            b = b.prev
        while a is not b and a is not None and b is not None:  # now equally long: they reach None together
            ours.append(a.turn)
            theirs.append(b.turn)
            a, b = a.prev, b.prev
        shared = 0 if a is None else a.size
        for mine, yours in zip(reversed(ours), reversed(theirs)):
            if mine != yours or (meta and mine.meta != yours.meta):
                break
            shared += 1
        return shared

    @property
    def last(self) -> Turn | None:
        return None if self._node is None else self._node.turn

    @property
    def meta(self) -> Mapping[str, Any]:
        return self._meta

    @property
    def usage(self) -> Usage:
        """Tokens used by every turn, summed."""
        return _ZERO if self._node is None else self._node.usage

    @property
    def outcome(self) -> Outcome | None:
        """How the run that wrote the last answer ended; ``None`` when no run recorded one, or when a user
        turn follows the last assistant turn (that message has no answer yet)."""
        node = self._node
        while node is not None:  # ``reversed()``, without a generator: patterns ask after every turn
            turn = node.turn
            role = turn.role
            if role is _ASSISTANT:
                return outcome_of_meta(turn.meta)
            if role is _USER:
                return None
            node = node.prev
        return None

    @property
    def degraded(self) -> bool:
        """Whether the last answer was written after a budget or cap stopped its run."""
        outcome = self.outcome
        return outcome is not None and outcome.status == DEGRADED

    @property
    def answer(self) -> str | None:
        """The text of the last assistant turn, or ``None`` if there is none or it holds no text."""
        node = self._node
        while node is not None:  # ``reversed()``, without a generator: asked after every message a session runs
            turn = node.turn
            if turn.role is _ASSISTANT:
                return turn.text or None
            node = node.prev
        return None

    @property
    def pending_calls(self) -> tuple[ToolCall, ...]:
        """Tool calls of the last assistant turn that no later ``ToolResult`` answers yet."""
        answered: set[str] | None = None
        node = self._node
        while node is not None:  # ``reversed()``, without a generator: asked before every message and turn
            turn = node.turn
            if turn.role is _ASSISTANT:
                calls = turn.tool_calls
                if not calls or answered is None:
                    return calls
                return tuple([c for c in calls if c.id not in answered])
            for part in turn.parts:
                if type(part) is ToolResult:
                    if answered is None:
                        answered = set()
                    answered.add(part.call_id)
            node = node.prev
        return ()

    # -- equality and display -----------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, State):
            return NotImplemented
        if self._node is other._node:
            return self._meta == other._meta
        return len(self) == len(other) and self._meta == other._meta and self.turns == other.turns

    # Unhashable, as a class defining __eq__ is; said outright so type checkers know it too. mypy has no
    # spelling of that without the ignore (typeshed marks list and dict the same way).
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        last = self.last
        tail = f", last={last.role.value}" if last is not None else ""
        return f"State(turns={len(self)}{tail}, meta={dict(self._meta)!r})"

    # -- JSON -----------------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"version": FORMAT_VERSION, "meta": dict(self._meta), "turns": [t.to_dict() for t in self.turns]}

    def to_json(self) -> str:
        """The state as JSON text; ``State.from_json`` reads it back to an equal state."""
        try:
            return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise UsageError(f"state cannot be written as JSON: {exc} (meta values must be JSON data)") from exc

    @classmethod
    def from_dict(cls, data: Any) -> State:
        if not isinstance(data, Mapping):
            raise UsageError(f"state: expected a JSON object, got {type(data).__name__}")
        version = data.get("version")
        if version not in _READS:
            raise UsageError(f"state: unsupported format version {version!r} (this code reads "
                             f"{', '.join(map(str, _READS))})")
        turns = data.get("turns")
        if not isinstance(turns, list):
            raise UsageError("state: 'turns' must be a list")
        meta = data.get("meta", {})
        if not isinstance(meta, Mapping):
            raise UsageError("state: 'meta' must be an object")
        parsed = [Turn.from_dict(t, where=f"turn {i}") for i, t in enumerate(turns)]
        return cls.restore(parsed, meta) if version == 1 else cls(parsed, meta)

    @classmethod
    def restore(cls, turns: tuple[Turn, ...] | list[Turn], meta: Mapping[str, Any] | None = None) -> State:
        """A conversation stored by an older version, as a state: the run results it kept in the state's
        meta (``degraded``, ``degraded_reason``, ``verification``, ``code_action``) move onto the last
        answer's outcome, where they belong."""
        meta, old = split_old_meta(meta or {})
        state = cls(turns, meta)
        if old is None or not any(t.role is Role.ASSISTANT for t in turns):
            return state
        last = next(t for t in state.reversed() if t.role is Role.ASSISTANT)
        if outcome_of_meta(last.meta) is not None:
            return state
        data = old.data
        state = state.with_outcome(old.status, old.reason, data=None)
        for path, value in data.items():
            state = state.with_outcome(OK, data=value, path=path)
        return state

    @classmethod
    def from_json(cls, text: str | bytes) -> State:
        """Read a state written by ``to_json``; raises ``UsageError`` naming what is wrong with bad input."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"state: not valid JSON: {exc}") from exc
        return cls.from_dict(data)


def _freeze(meta: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if not meta:
        return EMPTY
    if isinstance(meta, MappingProxyType):
        return meta
    if not isinstance(meta, Mapping):
        raise UsageError(f"meta must be a mapping, got {type(meta).__name__}")
    return MappingProxyType(dict(meta))
