"""The ``Store`` protocol every store implements, its errors, and the checks every store makes on its input."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from loop import LoopError, Role, State, Turn, UsageError
from loop.checks import non_negative_int


class StoreError(LoopError):
    """Raised when a store cannot read or write; nothing was half-written."""


class StoreConflict(StoreError):
    """Raised when an append would leave a gap: it starts after the end of the stored conversation."""


@runtime_checkable
class Store(Protocol):
    """Durable conversations, written turn by turn and never rewritten in place.

    ``append`` makes conversation ``session_id`` the first ``start`` stored turns followed by ``turns``, and
    replaces its meta with ``meta``, all or nothing. Usually ``start`` is the stored length (a plain append;
    0 creates the conversation). A smaller ``start`` moves to a branch: the turns after it stop being part of
    the conversation (a store may keep them for audit, but ``load`` no longer returns them). A ``start``
    past the stored length raises ``StoreConflict`` and writes nothing. Once ``append`` returns, the turns
    survive the process being killed. ``load`` returns the stored ``State``, or ``None`` for an unknown id.
    One writer per conversation at a time (a ``Manager`` ensures it within a process). Failures raise
    ``StoreError``.
    """

    async def load(self, session_id: str) -> State | None: ...

    async def append(self, session_id: str, start: int, turns: Sequence[Turn], meta: Mapping[str, Any]) -> None: ...


@runtime_checkable
class DeletingStore(Store, Protocol):
    """The optional ability to forget a conversation: ``delete`` returns whether it existed. ``MemoryStore`` and
    ``SQLiteStore`` have it; the OpenAI-compatible API uses it to drop per-request conversations."""

    async def delete(self, session_id: str) -> bool: ...


@runtime_checkable
class InboxStore(Store, Protocol):
    """The optional ability to keep messages durably until they are run: each conversation's inbox, a FIFO of
    user messages that were accepted (acknowledged to whoever sent them) but are not yet done. ``MemoryStore``
    and ``SQLiteStore`` have it; a ``Session`` uses it for ``post``, and a ``Manager`` to resume the messages
    a stopped process left waiting.

    ``post`` puts ``message`` (a user ``Turn`` whose meta holds its ``"message_id"``, a string) at the end of
    conversation ``session_id``'s inbox. Once it returns, the message survives the process being killed, as an
    append does. Posting an id already waiting changes nothing. Posting neither needs nor creates the
    conversation: ``load`` is unchanged.

    ``inbox`` returns the messages waiting in ``session_id``'s inbox, oldest first, as posted; ``()`` when none
    wait. ``inboxes`` returns the ids of the conversations with at least one message waiting, sorted.

    ``done`` takes message ``message_id`` out of the inbox for good (it was run, failed, or was dropped); an id
    that is not waiting is ignored. Posts, dones and appends of one conversation take effect in the order they
    were called, even when a store writes several in one transaction.

    Whoever runs the messages (a ``Session``) stores a message's user turn, with the same ``message_id`` in its
    meta, when it starts the message, and calls ``done`` once the message's run has ended and every turn of it
    is stored. So after a crash a waiting message whose user turn is not in the conversation was never started,
    and one whose user turn is the conversation's latest message was cut short: it runs again from its start
    (see ``Manager``), and so does one that stopped between its last turn and its ``done``. ``delete``
    (``DeletingStore``) forgets the inbox along with the conversation. Failures raise ``StoreError``; a message
    that is not a user turn with a string ``message_id`` raises ``UsageError``. A store shared by several
    processes also needs the per-conversation lease a single ``Manager`` gives: one runner of an inbox at a time.
    ``session.testing.check_store`` checks this contract when a store has the ability.
    """

    async def post(self, session_id: str, message: Turn) -> None: ...

    async def inbox(self, session_id: str) -> tuple[Turn, ...]: ...

    async def inboxes(self) -> tuple[str, ...]: ...

    async def done(self, session_id: str, message_id: str) -> None: ...


@runtime_checkable
class CheckpointStore(Store, Protocol):
    """The optional ability to keep checkpoints beside the conversations: the saved progress of a long run (a
    search's tree, a plan's steps), JSON data by key, so that a run stopped by its budget, an interrupt or a
    crash goes on where it stopped. ``MemoryStore`` and ``SQLiteStore`` have it; ``StoreCheckpoints`` makes
    such a store the ``cognitive.Checkpoints`` a pattern saves to, and ``Manager.checkpoints`` is its store's.

    ``save_checkpoint`` makes ``key`` hold ``data`` (a mapping of JSON data), replacing what it held, all or
    nothing; once it returns, the data survives the process being killed, as an append does.
    ``load_checkpoint`` returns what ``key`` holds, as JSON reads it back (a new ``dict`` each time), or
    ``None``. ``drop_checkpoint`` forgets it; dropping a key that holds nothing is fine. Checkpoints are not
    part of any conversation: deleting one (``DeletingStore``) keeps them. A key is a non-empty string of at
    most 256 characters (``cognitive.checkpoint_key`` makes them); a bad key, or data that is not a mapping
    of JSON data, raises ``UsageError`` and writes nothing. Failures raise ``StoreError``.
    """

    async def save_checkpoint(self, key: str, data: Mapping[str, Any]) -> None: ...

    async def load_checkpoint(self, key: str) -> Mapping[str, Any] | None: ...

    async def drop_checkpoint(self, key: str) -> None: ...


class LeaseLost(StoreConflict):
    """Raised when a write of a conversation is fenced off: another worker holds its lease, or took it over from
    this store's (whose epoch is now stale). Nothing of the write was written; the writer must stop running the
    conversation (a ``Manager`` closes its session)."""


@attrs.frozen
class Lease:
    """A worker's right to run one conversation: ``holder`` (the worker's id), its ``epoch`` (a number that grows
    with each new holder, the fencing token the store checks on every write of the holder's), and when it lapses
    (``expires``, seconds since the epoch by the store's clock) unless renewed."""

    session_id: str
    holder: str
    epoch: int
    expires: float


@runtime_checkable
class LeaseStore(Store, Protocol):
    """The optional ability to lease conversations to one worker at a time, for a store that several processes
    share (``PostgresStore`` has it): a ``Manager`` given such a store runs a conversation only while it holds its
    lease.

    ``acquire`` gives ``holder`` the lease of conversation ``session_id`` for ``ttl`` seconds when nobody holds it,
    when its holder let it lapse (its ``expires`` has passed), or when ``holder`` holds it already (then it is
    renewed, same epoch); otherwise ``None``. A lease that changes hands gets a new, higher epoch. From then on
    this store fences the conversation's writes (``append``, ``done``, ``delete``): each checks, in the write's
    own transaction, that the lease it holds is still the conversation's (same holder and epoch) and raises
    ``LeaseLost`` otherwise, writing nothing. A lapsed lease nobody has taken yet is still the conversation's.
    A store that holds no lease of a conversation may not write it while another holder's lease is live
    (``LeaseLost``); ``post`` is never fenced: any worker may queue a message for the holder.

    ``renew`` extends, to ``ttl`` seconds from now, every lease ``holder`` still holds, and returns their
    conversations' ids, sorted: one that is missing was taken over. ``release`` gives up ``holder``'s lease of
    ``session_id`` at once (releasing one it does not hold changes nothing). ``lapsed`` returns the ids of the
    conversations with messages waiting in their inbox (``InboxStore``) whose lease is free or lapsed: the work a
    stopped worker left for another to take over. Failures raise ``StoreError``.
    """

    async def acquire(self, session_id: str, holder: str, ttl: float) -> Lease | None: ...

    async def renew(self, holder: str, ttl: float) -> tuple[str, ...]: ...

    async def release(self, session_id: str, holder: str) -> None: ...

    async def lapsed(self) -> tuple[str, ...]: ...


class HandOffs(Protocol):
    """The conversations whose inbox another worker has put a message in for one holder: an async iterator of their
    ids, each as it happens, and ``None`` after any moment it may have missed some (then every conversation the
    holder runs may have new messages), closed with ``aclose`` (or ``async with``)."""

    def __aiter__(self) -> AsyncIterator[str | None]: ...

    async def __anext__(self) -> str | None: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class HandOffStore(LeaseStore, InboxStore, Protocol):
    """The optional ability of a leasing store to hand a message to the worker that holds its conversation, rather
    than move the conversation to the worker the message reached (``PostgresStore`` has it).

    ``hand_off`` puts ``message`` (a user turn with a ``message_id`` in its meta, as for ``post``) in the
    conversation's inbox while another holder's lease of it is live, tells that holder, and returns how many
    messages wait before it (the one running included); while no lease is live it stores nothing and returns
    ``None`` (the caller then takes the lease itself). When ``limit`` messages or more wait already, it stores
    nothing and returns their number. The lease cannot be released between the check and the
    message being stored, so a holder that lets go of it after finds the message waiting. ``hand_offs(holder)``
    follows what is handed to ``holder`` (``HandOffs``); ``waiting_ids`` gives the ``message_id`` of each message
    in a conversation's inbox, oldest first (a cheaper read than ``inbox``).
    """

    async def hand_off(self, session_id: str, message: Turn, *, limit: int) -> int | None: ...

    async def waiting_ids(self, session_id: str) -> tuple[str, ...]: ...

    def hand_offs(self, holder: str) -> HandOffs: ...


@runtime_checkable
class FollowedEvent(Protocol):
    """One event of a feed: its ``id`` (rising within its session), its wire ``type``, its JSON text ``data``, and
    whether the conversation's main line published it (``main``)."""

    @property
    def id(self) -> int: ...

    @property
    def type(self) -> str: ...

    @property
    def data(self) -> str: ...

    @property
    def main(self) -> bool: ...


class EventFollowing(Protocol):
    """A follower of one session's events: an async iterator of them, each once and in order, closed with
    ``aclose`` (or ``async with``). A step of it may be cancelled without losing an event."""

    def __aiter__(self) -> AsyncIterator[FollowedEvent]: ...

    async def __anext__(self) -> FollowedEvent: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class EventFeed(Protocol):
    """Sessions' events, published by whichever process runs a session and followed live by any process, which is
    what lets a reader connected anywhere see a run that happens elsewhere. ``publish`` adds ``events`` (each its
    wire type, JSON text and whether the main line published it) and returns their ids; ``follow`` gives a
    follower of a session's events after an id. ``PostgresEvents`` is one."""

    async def publish(self, session_id: str, events: Sequence[tuple[str, str, bool]]) -> list[int]: ...

    def follow(self, session_id: str, after: int = 0) -> EventFollowing: ...


@runtime_checkable
class FeedStore(Store, Protocol):
    """The optional ability of a store several processes share to carry its sessions' events between them:
    ``event_feed`` returns its feed (the same one each time). ``PostgresStore`` has it; the HTTP conduit then
    publishes the events of every session its process runs to it, and streams any session's from it."""

    def event_feed(self) -> EventFeed: ...


@attrs.frozen
class StoredSession:
    """What a listing says of one stored conversation: its ``id``, a ``title`` (its first user message's text, cut
    to ``TITLE_CHARS`` characters; empty when it has none), how many ``turns`` it holds, and when it was last
    ``updated`` (seconds since the epoch)."""

    id: str
    title: str
    turns: int
    updated: float


TITLE_CHARS = 120


def title_of(turns: Iterable[Turn]) -> str:
    """The title of a conversation starting with ``turns``: its first user message's text, on one line, cut to
    ``TITLE_CHARS``."""
    for turn in turns:
        if turn.role is Role.USER and turn.kind is None:
            text = " ".join(turn.text.split())
            return text if len(text) <= TITLE_CHARS else text[:TITLE_CHARS - 1] + "\u2026"
    return ""


@runtime_checkable
class ListingStore(Store, Protocol):
    """The optional ability to list stored conversations: ``list_sessions`` returns those whose id starts with
    ``prefix`` (a namespace, as the HTTP conduit gives each token), most recently updated first, at most ``limit``
    of them. ``MemoryStore`` and ``SQLiteStore`` have it; the HTTP conduit's ``GET /sessions`` (and so the chat
    page's list of conversations) needs it."""

    async def list_sessions(self, prefix: str = "", *, limit: int = 100) -> tuple[StoredSession, ...]: ...


def check_listing(prefix: Any, limit: Any) -> None:
    """``UsageError`` unless ``prefix`` is a string and ``limit`` a positive int."""
    if not isinstance(prefix, str):
        raise UsageError(f"a listing's prefix must be a string, got {prefix!r}"[:200])
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise UsageError(f"a listing's limit must be a positive int, got {limit!r}"[:200])


MAX_SESSION_ID = 256  # room for a client's name of up to 200 characters in a namespace (see HTTPConduit)


def check_session_id(session_id: Any) -> str:
    if not isinstance(session_id, str) or not session_id or len(session_id) > MAX_SESSION_ID:
        raise UsageError(f"a session id is a non-empty string of at most {MAX_SESSION_ID} characters, "
                         f"got {session_id!r}"[:400])
    return session_id


MAX_HOLDER = 256


def check_holder(holder: Any) -> str:
    if not isinstance(holder, str) or not holder or len(holder) > MAX_HOLDER:
        raise UsageError(f"a lease's holder is a non-empty string of at most {MAX_HOLDER} characters, "
                         f"got {holder!r}"[:400])
    return holder


def check_ttl(ttl: Any) -> float:
    if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and ttl > 0 and math.isfinite(ttl):
        return float(ttl)
    raise UsageError(f"a lease's ttl must be a positive, finite number of seconds, got {ttl!r}"[:200])


def check_append(session_id: str, stored: int, start: Any, turns: Sequence[Turn]) -> None:
    """Raise what a store must raise for a bad append, before anything is written."""
    non_negative_int("start (a turn index)", start)
    if start > stored:
        raise StoreConflict(f"session {session_id!r} holds {stored} turns; an append starting at turn {start} "
                            "would leave a gap")
    for turn in turns:
        if not isinstance(turn, Turn):
            raise UsageError(f"a store holds Turn values, got {turn!r}")


def check_posted(message: Any) -> str:
    """The id of a message for an inbox (see ``InboxStore.post``); ``UsageError`` when it cannot be one."""
    if not isinstance(message, Turn) or message.role is not Role.USER:
        raise UsageError(f"an inbox holds user turns, got {message!r}"[:400])
    message_id = message.meta.get("message_id")
    if not isinstance(message_id, str) or not message_id:
        raise UsageError(f"a posted message's meta needs its 'message_id' (a string), got {message.meta!r}"[:400])
    return message_id


MAX_CHECKPOINT_KEY = 256


def check_checkpoint_key(key: Any) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_CHECKPOINT_KEY:
        raise UsageError(f"a checkpoint key is a non-empty string of at most {MAX_CHECKPOINT_KEY} characters, "
                         f"got {key!r}"[:400])
    return key


def checkpoint_text(key: str, data: Any) -> str:
    """``data`` as the JSON text a store keeps under checkpoint ``key``; ``UsageError`` when it is not a
    mapping of JSON data."""
    if not isinstance(data, Mapping):
        raise UsageError(f"checkpoint {key!r} must be a mapping of JSON data, got {type(data).__name__}")
    try:
        return json.dumps(dict(data), ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"checkpoint {key!r} must be JSON data: {exc}") from None


def read_checkpoint(key: str, text: str, where: str) -> dict[str, Any]:
    """The data a store kept as ``text`` under checkpoint ``key``; ``StoreError`` when it cannot be read."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StoreError(f"checkpoint {key!r} in {where} is not JSON ({exc}); drop it to start afresh") from None
    if not isinstance(data, dict):
        raise StoreError(f"checkpoint {key!r} in {where} is not a JSON object; drop it to start afresh")
    return data
