"""``ResponseCache``: a provider wrapper that answers a request it has answered before from the stored response.

A model request is a pure value (turns, tools, options, model), so an identical one can be answered again
without asking the model: the wrapper keys each request by a digest of what the model would see, replays a
stored response as the very deltas the model streamed, and asks the model only on a miss. Sitting where the
provider sits, it leaves the step above it doing everything it does (events, spans, budgets, turn building).

A replay charges nothing: its usage is replayed as ``REPLAYED`` (zero tokens, recognised by identity), so the
step charges no tokens or cost for it and marks the turn it builds ``meta["cache"] == "hit"``.
"""

from __future__ import annotations

import collections
import hashlib
import json
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any, Protocol, cast, runtime_checkable

import anyio
import anyio.lowlevel
import attrs
from opentelemetry import trace

from loop import tracing
from loop.checks import positive_int, positive_number
from loop.codec import part_to_dict
from loop._accumulate import REPLAYED
from loop._context import current_run_context
from loop._executor import Closable, has, provider_info, require
from loop._parts import Usage
from loop._protocols import (Delta, DeltaStream, Finish, Options, Provider, ProviderInfo, Request, UsageDelta,
                             UseTool)
from loop._scope import current_scope, in_sample
from loop.errors import UsageError

__all__ = ["CACHE_HIT", "CacheStats", "CacheStore", "MemoryCache", "ResponseCache"]

CACHE_HIT = "cognitive_loop.cache.hit"
"""The chat span attribute saying whether the response came from a ``ResponseCache`` (``True``) or the model."""

_log = tracing.logger("loop.cache")
_KEY_VERSION = 1  # part of every key: a change to the canonical form must never hit an entry of the old one


@runtime_checkable
class CacheStore(Protocol):
    """Where a ``ResponseCache`` keeps responses: the deltas of each complete response under its key.

    ``get`` returns the deltas stored under ``key``, or ``None`` when there are none (never stored, evicted,
    or older than the store keeps them); ``put`` stores them, replacing what was there. Limits on size and
    age are the store's own. Both are async so that a store may do I/O; neither is ever handed a partial
    response."""

    async def get(self, key: str) -> tuple[Delta, ...] | None: ...

    async def put(self, key: str, deltas: tuple[Delta, ...]) -> None: ...


def check_limits(who: str, max_entries: Any, max_age: Any) -> tuple[int | None, float | None]:
    """The two limits every bundled store takes, checked: ``None`` is no limit."""
    return (positive_int(f"{who} max_entries", max_entries, optional=True),
            positive_number(f"{who} max_age", max_age, unit="seconds", optional=True))


def check_clock(clock: Any) -> Callable[[], float]:
    if not callable(clock):
        raise UsageError(f"clock must be a function returning seconds, got {clock!r}")
    return cast(Callable[[], float], clock)


class MemoryCache:
    """Responses in this process's memory, at most ``max_entries`` of them (the least recently used go first)
    and none older than ``max_age`` seconds (``None``: no limit). ``clock`` (monotonic seconds) is replaceable,
    so tests can age entries on a fake clock."""

    def __init__(self, *, max_entries: int | None = 1024, max_age: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries, self.max_age = check_limits("MemoryCache", max_entries, max_age)
        self._clock = check_clock(clock)
        self._entries: collections.OrderedDict[str, tuple[float, tuple[Delta, ...]]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str) -> tuple[Delta, ...] | None:
        found = self._entries.get(key)
        if found is None:
            return None
        stored, deltas = found
        if self.max_age is not None and self._clock() - stored > self.max_age:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)  # recently used: the last to be evicted
        return deltas

    async def put(self, key: str, deltas: tuple[Delta, ...]) -> None:
        self._entries[key] = (self._clock(), deltas)
        self._entries.move_to_end(key)
        if self.max_entries is not None:
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def __repr__(self) -> str:
        return f"MemoryCache({len(self._entries)} entries, max_entries={self.max_entries}, max_age={self.max_age})"


@attrs.frozen
class CacheStats:
    """What a ``ResponseCache`` did: requests answered from the store (``hits``), asked of the model while
    cacheable (``misses``), responses stored (``stores``), and requests passed straight through (``bypassed``:
    sampled turns, and requests with values that have no JSON form). ``saved`` is the usage the hits' stored
    responses reported: what the model would have charged for them again."""

    hits: int = 0
    misses: int = 0
    stores: int = 0
    bypassed: int = 0
    saved: Usage = Usage()

    @property
    def hit_rate(self) -> float:
        """Hits among the requests the cache looked up (0 before any)."""
        looked = self.hits + self.misses
        return self.hits / looked if looked else 0.0


class ResponseCache:
    """Answers a request identical to one answered before from the stored response, without asking ``inner``.

    A request is keyed (``key``) by a sha256 digest of its turns (their roles, names and parts, but not their
    meta or token usage, which the model never sees), its tools, the options that reach the model, the model
    (the options' or the provider's own) and, unless ``per_caller=False``, the caller of the run
    (``loop.current_run_context().caller``: its id and namespace), so that two callers never share an answer.
    ``partition`` keeps caches that share one ``store`` apart (say, two providers that name no model).

    A hit replays the stored deltas in order, their usage replayed with zero tokens: nothing is
    charged to a budget, the step marks the assistant turn ``meta["cache"] == "hit"``, and the chat span gets
    ``cognitive_loop.cache.hit`` (``CACHE_HIT``). Only a response that streamed to its end is stored: one that
    failed, was cancelled or closed early never is.

    Sampled turns pass straight through unless ``sampled=True``: a request made in a sample branch (a run path
    with ``sample N`` or ``samples``, as ``Step.sample`` and sampling patterns name them) or asking for several
    choices (``Options.n`` above 1), since a cache would answer every sample with the same one.

    ``store`` is a ``MemoryCache()`` unless given (``SQLiteCache`` keeps responses across restarts, or write a
    ``CacheStore`` of your own). ``stats`` counts hits, misses, stores and bypassed requests.
    """

    def __init__(self, inner: Provider, *, store: CacheStore | None = None, per_caller: bool = True,
                 sampled: bool = False, partition: str = "") -> None:
        require(inner, Provider, "ResponseCache", "a provider to wrap (something with stream(request))")
        if store is None:
            store = MemoryCache()
        elif not has(store, CacheStore):
            raise UsageError(f"ResponseCache(store=) takes a loop.CacheStore (async get(key) and put(key, deltas)), "
                             f"such as loop.MemoryCache() or loop.SQLiteCache(path); got {store!r}")
        for name, value in (("per_caller", per_caller), ("sampled", sampled)):
            if not isinstance(value, bool):
                raise UsageError(f"ResponseCache {name} must be True or False, got {value!r}")
        if not isinstance(partition, str):
            raise UsageError(f"ResponseCache partition must be a string, got {partition!r}")
        self.inner = inner
        self.store = store
        self.per_caller = per_caller
        self.sampled = sampled
        self.partition = partition
        self._hits = self._misses = self._stores = self._bypassed = 0
        self._saved = Usage()

    @property
    def info(self) -> ProviderInfo:
        """What the wrapped provider says of itself."""
        return provider_info(self.inner)

    @property
    def stats(self) -> CacheStats:
        """A snapshot of the counts so far."""
        return CacheStats(self._hits, self._misses, self._stores, self._bypassed, self._saved)

    async def aclose(self) -> None:
        """Close the provider it wraps, when that one holds anything to close (``loop.Closable``). The store is
        the caller's to close: several caches may share it."""
        if has(self.inner, Closable):
            await cast(Closable, self.inner).aclose()

    def key(self, request: Request) -> str:
        """The digest ``request`` is stored under, for the caller of the run this is called in. Raises
        ``UsageError`` when the request holds a value with no JSON form (such a request is never cached)."""
        try:
            text = json.dumps(self._canonical(request), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False, default=_plain)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"this request cannot be keyed: {exc}") from None
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def stream(self, request: Request) -> DeltaStream:
        if not self.sampled and _is_sample(request):
            self._bypassed += 1
            return self.inner.stream(request)
        try:
            key = self.key(request)
        except UsageError:
            self._bypassed += 1
            return self.inner.stream(request)
        return self._stream(request, key)

    async def _stream(self, request: Request, key: str) -> AsyncGenerator[Delta, None]:
        try:
            stored = await self.store.get(key)
        except Exception as exc:  # a store that cannot be read costs a model call, never the answer
            _log.warning("the response cache could not read its store; asking the model", store=repr(self.store),
                         error=repr(exc))
            stored = None
        if stored is not None:
            self._hits += 1
            _mark_span(True)
            saved = _usage_of(stored)
            if saved is not None:
                self._saved += saved
            # A hit is a call too: other tasks run, and a cancellation lands here. The deltas then follow at once,
            # as those of a response read from the network in one piece do (a checkpoint per delta would double
            # a replay's cost, for a stream that never waits).
            await anyio.lowlevel.checkpoint()
            for delta in replayed(stored):
                yield delta
            return
        self._misses += 1
        _mark_span(False)
        got: list[Delta] = []
        stream: Any = None
        try:
            stream = self.inner.stream(request)  # inside the try: a provider may fail in stream() itself
            async for delta in stream:
                got.append(delta)
                yield delta
        finally:
            if stream is not None:  # close the inner stream however this one ends, left early or cancelled
                with anyio.CancelScope(shield=True):
                    await stream.aclose()
        # Only reached when the inner stream ran to its end and the consumer asked past the last delta.
        try:
            await self.store.put(key, tuple(got))
        except Exception as exc:  # the answer stands; a store that cannot keep it costs only the next call
            _log.warning("the response cache could not store a response", store=repr(self.store), error=repr(exc))
            return
        self._stores += 1

    def _canonical(self, request: Request) -> dict[str, Any]:
        options = request.options
        chosen: dict[str, Any] = {}
        for field in _OPTION_FIELDS:
            value = getattr(options, field)
            if value is not None:
                chosen[field] = {"tool": value.name} if isinstance(value, UseTool) else value
        caller = current_run_context().caller if self.per_caller else None
        return {
            "v": _KEY_VERSION,
            "partition": self.partition,
            "model": options.model or provider_info(self.inner).model,
            "caller": None if caller is None else [caller.id, caller.namespace],
            "turns": [_turn_form(turn) for turn in request.turns],
            "tools": [[spec.name, spec.description, spec.parameters] for spec in request.tools],
            "options": chosen,
        }

    def __repr__(self) -> str:
        return f"ResponseCache({self.inner!r}, store={self.store!r})"


# The options that reach the model: not the model (keyed apart, with the provider's default), nor ``run_tools``,
# which only tells the step whether to run the calls.
_OPTION_FIELDS = tuple(f.name for f in attrs.fields(Options) if f.name not in ("model", "run_tools"))


def _turn_form(turn: Any) -> list[Any]:
    # Token usage is bookkeeping the model never sees, and differs between a hit and the miss it replays: keyed
    # by it, the next request of a conversation answered from the cache would never hit.
    return [turn.role.value, turn.name, [part_to_dict(p) for p in turn.parts if type(p) is not Usage]]


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    raise TypeError(f"{type(value).__name__} {value!r} has no JSON form")


def _is_sample(request: Request) -> bool:
    n = request.options.n
    if n is not None and n > 1:
        return True
    return in_sample(request.path or current_scope().path)


def _mark_span(hit: bool) -> None:
    # The consumer iterates this stream inside its span (the step's chat span), which is the current one here.
    if tracing.current_tracer() is not None:
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attribute(CACHE_HIT, hit)


def _usage_of(deltas: tuple[Delta, ...]) -> Usage | None:
    total: Usage | None = None
    for delta in deltas:
        if type(delta) is UsageDelta:
            total = delta.usage if total is None else total + delta.usage
    return total


def replayed(deltas: tuple[Delta, ...]) -> list[Delta]:
    """``deltas`` as a hit replays them: the same deltas in the same order, their usage as one ``REPLAYED``
    usage (zero tokens, naming the model that answered) where the first usage was, or before the first
    ``Finish`` (at the end, without one) when the response reported none."""
    model = next((d.model for d in reversed(deltas) if type(d) is UsageDelta and d.model), None)
    out: list[Delta] = []
    usage_done = False
    for delta in deltas:
        kind = type(delta)
        if kind is UsageDelta:
            if not usage_done:
                out.append(UsageDelta(REPLAYED, model, cast(UsageDelta, delta).choice))
                usage_done = True
            continue
        if kind is Finish and not usage_done:
            out.append(UsageDelta(REPLAYED, model))
            usage_done = True
        out.append(delta)
    if not usage_done:
        out.append(UsageDelta(REPLAYED, model))
    return out
