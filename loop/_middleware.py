"""``TurnMiddleware``: the one delegating base that turn wrappers share, so they compose in any order."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from loop._executor import Executor, Transform, provider_info, require
from loop._parts import Part, Role
from loop._protocols import Options, Provider, ProviderInfo
from loop._state import State

if TYPE_CHECKING:
    from loop._events import EventBus
    from loop._pipeline import ToolPipeline

M = TypeVar("M", bound="TurnMiddleware")


class TurnMiddleware:
    """Wraps an ``Executor`` and keeps every ability of it: subclass it and override ``turn`` (and ``sample``,
    when the change applies to samples too); everything else is the ``inner`` executor's.

    ``derive`` derives the inner executor and wraps the result again (``rewrap``), so a stage a pattern derives
    keeps the middleware: ``Managed(Summarize(step, ...))`` summarizes, and ``ReuseResults(Summarize(step))``
    and ``Summarize(ReuseResults(step))`` both work. A subclass that keeps something made from ``inner``
    overrides ``rewrap`` to make it again. Settings live on the instance and never change after ``__init__``.
    """

    __slots__ = ("inner",)

    def __init__(self, inner: Executor) -> None:
        self.inner: Executor = require(inner, Executor, type(self).__name__)

    async def turn(self, state: State, options: Options | None = None) -> State:
        return await self.inner.turn(state, options)

    async def submit(self, state: State, role: Role, *parts: Part, meta: Mapping[str, Any] | None = None,
                     name: str | None = None) -> State:
        return await self.inner.submit(state, role, *parts, meta=meta, name=name)

    async def sample(self, state: State, n: int, options: Options | None = None) -> tuple[State, ...]:
        return await self.inner.sample(state, n, options)

    @property
    def samples_in_one_request(self) -> bool:
        return self.inner.samples_in_one_request

    @property
    def info(self) -> ProviderInfo:
        return provider_info(self.inner)

    def derive(self, *, provider: Provider | None = None, options: Options | None = None,
               tools: Iterable[str] | None = None, transforms: Sequence[Transform] | None = None) -> Executor:
        return self.rewrap(self.inner.derive(provider=provider, options=options, tools=tools,
                                             transforms=transforms))

    def rewrap(self: M, inner: Executor) -> Executor:
        """This middleware with the same settings around ``inner`` (a derived executor)."""
        new = copy.copy(self)
        new.inner = inner
        return new

    async def view(self, state: State) -> State:
        return await self.inner.view(state)

    @property
    def options(self) -> Options:
        return self.inner.options

    @property
    def transforms(self) -> tuple[Transform, ...]:
        return self.inner.transforms

    @property
    def pipeline(self) -> ToolPipeline:
        return self.inner.pipeline

    @property
    def events(self) -> EventBus:
        return self.inner.events

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"
