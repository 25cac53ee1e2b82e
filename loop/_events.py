"""Events a step publishes, and the bus that fans them out without ever waiting for a subscriber."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs

from loop.checks import positive_int
from loop.errors import UsageError
from loop._parts import ToolCall, ToolResult
from loop._scope import current_scope
from loop._turn import Turn
from loop._wake import Wake


@attrs.frozen
class TurnStarted:
    """A step began a turn on a state of ``index`` turns."""

    index: int


@attrs.frozen
class TurnCompleted:
    """A turn was appended to the conversation (assistant, tool results, or a submitted turn)."""

    turn: Turn


@attrs.frozen
class TurnFailed:
    """A turn ended with an exception (the provider failed, or the turn was cancelled); it is re-raised."""

    error: BaseException


@attrs.frozen
class ToolStarted:
    call: ToolCall


@attrs.frozen
class ToolFinished:
    call: ToolCall
    result: ToolResult
    seconds: float


@attrs.frozen
class BudgetReport:
    """A budgeted run ended: what it ``spent`` in all (a ``loop.Spent``), ``by_path`` (every run path that
    spent, discarded branches included), and why the budget ran out (``exhausted``, ``None`` if it did not)."""

    budget: str
    spent: Any
    by_path: Any
    exhausted: str | None = None


@attrs.frozen
class Stamped:
    """An event as a stamped subscription receives it: with the run ``path`` that published it, and whether
    it came from the main line (``main``) rather than a branch, a tool, or a task of its own."""

    event: Any
    path: str
    main: bool


@attrs.frozen
class EventsDropped:
    """Delivered in place of ``count`` events a subscriber missed because its buffer was full."""

    count: int


class Subscription:
    """One subscriber's view of a bus: an async iterator over the events published after it subscribed.

    Its buffer holds at most ``buffer`` events (``None``: unbounded). When it is full, new events are dropped
    for this subscriber only and an ``EventsDropped`` marker takes their place, so a slow subscriber loses
    events but never slows the publisher. Use it as a context manager, or call ``close``.
    """

    def __init__(self, bus: EventBus, buffer: int | None, stamped: bool = False, main_line: bool = False) -> None:
        self._bus = bus
        self._buffer = buffer
        self.stamped = stamped
        self.main_line = main_line
        # Every event is appended as it is, never dropped: ``publish`` does it inline.
        self._plain = buffer is None and not stamped and not main_line
        self._queue: deque[Any] = deque()
        self._dropped = 0
        self._wake: Wake | None = None
        self.closed = False

    def _offer(self, event: Any) -> None:
        queue = self._queue
        if self._buffer is not None and len(queue) >= self._buffer:
            self._dropped += 1
            return
        if self._dropped:
            queue.append(EventsDropped(self._dropped))
            self._dropped = 0
        queue.append(event)
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set()

    def drain(self) -> list[Any]:
        """Every buffered event, without waiting; the buffer is left empty."""
        events = list(self._queue)
        self._queue.clear()
        if self._dropped:
            events.append(EventsDropped(self._dropped))
            self._dropped = 0
        return events

    def close(self) -> None:
        """Stop receiving; an iteration waiting for events ends after the buffered ones."""
        if not self.closed:
            self.closed = True
            self._bus._remove(self)
            if self._wake is not None:
                self._wake.set()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        while not self._queue:
            if self._dropped:
                dropped, self._dropped = self._dropped, 0
                return EventsDropped(dropped)
            if self.closed:
                raise StopAsyncIteration
            self._wake = wake = Wake()
            await wake
        return self._queue.popleft()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class EventBus:
    """Fans published events out to subscribers. ``publish`` never blocks and never raises.

    ``has_subscribers`` tells whether anyone is listening: publishers may skip building events nobody will
    receive. (An attribute kept up to date, not a property: a session asks it several times per message.)
    """

    __slots__ = ("_subscribers", "has_subscribers", "_holds")

    def __init__(self) -> None:
        self._subscribers: tuple[Subscription, ...] = ()
        self.has_subscribers = False
        self._holds: tuple[Hold, ...] = ()

    def subscribe(
        self, *, buffer: int | None = 1024, stamped: bool = False, main_line: bool = False
    ) -> Subscription:
        """A new subscription to every event published from now on.

        A ``stamped`` one receives each event wrapped in a ``Stamped`` naming the run path that published it
        and whether that was the main line. A ``main_line`` one receives only what the main line published:
        no branch's, tool's or side task's text, so a streaming conduit never interleaves five samples.
        """
        positive_int("buffer", buffer, optional=True)
        sub = Subscription(self, buffer, stamped, main_line)
        self._subscribers = (*self._subscribers, sub)
        self.has_subscribers = True
        return sub

    def hold(self, keeps: Callable[[Stamped], bool]) -> Hold:
        """Keep back from every subscriber the events published from now on that ``keeps`` takes, until the
        ``Hold`` releases them (see ``Hold``)."""
        if not callable(keeps):
            raise UsageError(f"EventBus.hold takes a function (Stamped) -> bool, got {keeps!r}")
        held = Hold(self, keeps)
        self._holds = (*self._holds, held)
        return held

    def publish(self, event: Any) -> None:
        if self._holds and self._held(Stamped(event, *_stamp()), len(self._holds)):
            return
        stamp: Stamped | None = None
        for sub in self._subscribers:
            if sub._plain:
                # ``_offer`` inline for an unbounded plain subscription: a session publishes ten events per message.
                sub._queue.append(event)
                wake = sub._wake
                if wake is not None:
                    sub._wake = None
                    wake.set()
            elif sub.stamped or sub.main_line:
                if stamp is None:
                    scope = current_scope()
                    stamp = Stamped(event, scope.path, scope.on_main_line)
                if sub.main_line and not stamp.main:
                    continue
                sub._offer(stamp if sub.stamped else event)
            else:
                sub._offer(event)

    def _held(self, stamped: Stamped, below: int) -> bool:
        """Whether one of the first ``below`` holds keeps ``stamped`` (the innermost, the newest, asked first)."""
        holds = self._holds
        for index in range(min(below, len(holds)) - 1, -1, -1):
            hold = holds[index]
            if hold.keeps(stamped):
                hold._kept.append(stamped)
                return True
        return False

    def _fan_out(self, stamped: Stamped) -> None:
        """Deliver an event released from a hold, stamped as it was when published."""
        event = stamped.event
        for sub in self._subscribers:
            if sub.main_line and not stamped.main:
                continue
            sub._offer(stamped if sub.stamped else event)

    def _remove(self, sub: Subscription) -> None:
        self._subscribers = tuple(s for s in self._subscribers if s is not sub)
        self.has_subscribers = bool(self._subscribers)


def _stamp() -> tuple[str, bool]:
    scope = current_scope()
    return scope.path, scope.on_main_line


class Hold:
    """Events kept back from a bus's subscribers until they may be seen: those its ``keeps`` takes among the
    events published while it is on the bus (``EventBus.hold(keeps)``).

    ``keeps`` is called with each event as a ``Stamped`` (the run path that publishes it, and whether that is
    the main line), in the publisher's context, before any subscriber sees it; it may call ``release`` itself,
    and the event it is deciding on goes out after the released ones when it returns ``False``.

    ``release`` sends the kept events on in the order they were published, stamped as when they were
    published, to the subscribers the bus has then, through the holds placed before this one (a hold nested in
    another releases into it). ``release(drop=...)`` leaves out, for good, the events ``drop`` takes. ``close``
    (or the end of its ``with`` block) releases what is still kept and takes the hold off the bus. Publishing
    never waits for a hold, as it never waits for a subscriber.
    """

    __slots__ = ("_bus", "keeps", "_kept", "dropped")

    def __init__(self, bus: EventBus, keeps: Callable[[Stamped], bool]) -> None:
        self._bus = bus
        self.keeps = keeps
        self._kept: list[Stamped] = []
        self.dropped = 0  # events ``release(drop=...)`` left out

    @property
    def kept(self) -> int:
        """How many events are kept now."""
        return len(self._kept)

    def release(self, drop: Callable[[Any], bool] | None = None) -> None:
        """Send on every kept event (but those ``drop`` takes, which are gone for good)."""
        kept, self._kept = self._kept, []
        bus = self._bus
        holds = bus._holds
        below = holds.index(self) if self in holds else len(holds)
        for stamped in kept:
            if drop is not None and drop(stamped.event):
                self.dropped += 1
            elif not (below and bus._held(stamped, below)):
                bus._fan_out(stamped)

    def close(self) -> None:
        """Release what is still kept, and take the hold off the bus."""
        self.release()
        bus = self._bus
        bus._holds = tuple(h for h in bus._holds if h is not self)

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
