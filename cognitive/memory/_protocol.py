"""The ``Memory`` protocol: remember texts for a scope, recall the ones closest in meaning to a query.

A scope is whose memory it is: the caller's namespace (a bearer token's), the caller's id (a user), and a space
(``"memory"`` for what an agent remembers, another name for, say, a semantic cache), so two callers never see
each other's items and erasing a user removes everything kept for them in every space.
"""

from __future__ import annotations

import time
import types
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from loop import Caller, UsageError, current_run_context

MEMORY = "memory"
"""The space an agent's memories live in (``Scope.space``)."""


def _text(name: str, *, empty: bool) -> Any:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if not isinstance(value, str) or (not empty and not value):
            raise UsageError(f"Scope {name} must be a {'string' if empty else 'non-empty string'}, got {value!r}")
    return check


@attrs.frozen
class Scope:
    """Whose memory: ``user`` (a caller's id; ``""`` for memory shared by the whole namespace) in ``namespace``
    (a caller's namespace), in ``space`` (``"memory"`` unless another use keeps items apart)."""

    user: str = attrs.field(validator=_text("user", empty=True))
    namespace: str = attrs.field(default="", validator=_text("namespace", empty=True))
    space: str = attrs.field(default=MEMORY, validator=_text("space", empty=False))

    @classmethod
    def of(cls, caller: Caller | None, space: str = MEMORY) -> Scope:
        """The scope of ``caller`` (its id and namespace); ``None`` (nobody said who) is the anonymous scope,
        user ``""`` in namespace ``""``, which every run without a caller shares."""
        if caller is None:
            return cls("", "", space)
        if not isinstance(caller, Caller):
            raise UsageError(f"Scope.of takes a loop.Caller or None, got {type(caller).__name__}")
        return cls(caller.id, caller.namespace, space)

    @classmethod
    def current(cls, space: str = MEMORY) -> Scope:
        """The scope of the caller of the run this is called in (``loop.current_run_context().caller``)."""
        return cls.of(current_run_context().caller, space)

    def with_space(self, space: str) -> Scope:
        """The same caller's scope in another ``space``."""
        return attrs.evolve(self, space=space)


def _meta(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if value is None:
        return types.MappingProxyType({})
    if not isinstance(value, Mapping):
        raise UsageError(f"memory item meta must be a mapping, got {type(value).__name__}")
    return types.MappingProxyType(dict(value))


@attrs.frozen
class MemoryItem:
    """One remembered text: its ``id`` (the store's), ``scope``, ``text``, the conversation it came from
    (``source``, ``""`` when none), when it was remembered (``created``, Unix seconds) and ``meta`` (JSON values
    the application keeps with it)."""

    id: str
    scope: Scope
    text: str
    source: str = ""
    created: float = attrs.field(factory=time.time)
    meta: Mapping[str, Any] = attrs.field(factory=dict, converter=_meta, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "user": self.scope.user, "namespace": self.scope.namespace,
                "space": self.scope.space, "text": self.text, "source": self.source, "created": self.created,
                "meta": dict(self.meta)}


@attrs.frozen
class Recalled:
    """An item found for a query, with its cosine similarity to the query (``score``: higher is closer)."""

    item: MemoryItem
    score: float


@runtime_checkable
class Memory(Protocol):
    """Remembers texts per scope and recalls the ``k`` closest in meaning to a query, best first.

    ``remember`` embeds ``text`` as a passage and stores it with its ``source`` conversation and ``meta``;
    ``recall`` embeds ``query`` as a query and returns at most ``k`` items of exactly that scope, highest score
    first. Neither ever returns another scope's items.
    """

    async def remember(self, scope: Scope, text: str, *, source: str = "",
                       meta: Mapping[str, Any] | None = None) -> MemoryItem: ...

    async def recall(self, scope: Scope, query: str, *, k: int = 5) -> list[Recalled]: ...


@runtime_checkable
class Forgetting(Protocol):
    """A memory that can forget: ``forget`` deletes items of ``scope`` by id (ids of other scopes are left
    alone); ``erase`` deletes everything kept for ``user`` in ``namespace``, in every space (an erasure request).
    Both return how many items were deleted."""

    async def forget(self, scope: Scope, *ids: str) -> int: ...

    async def erase(self, user: str, namespace: str = "") -> int: ...
