"""What the provider tests share: a one-message request, the deltas a provider streams for it, and a provider
whose streams only an explicit close can close."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from loop import Delta, Request, Role, Text, Turn, UsageDelta

REQUEST = Request((Turn(Role.USER, (Text("hi"),)),))


async def collect(provider: Any, request: Request = REQUEST, *, estimates: bool = False) -> list[Any]:
    """Every delta ``provider`` streams for ``request``, in order; without the usage a provider estimates for a
    server that reports none (``Usage.estimated``), unless ``estimates`` (tests of other things compare the
    server's own deltas)."""
    return [delta async for delta in provider.stream(request)
            if estimates or not (isinstance(delta, UsageDelta) and delta.usage.estimated)]


class Held:
    """A provider that streams ``deltas`` and holds on to every stream it hands out, so the garbage collector
    cannot be what closes one; ``closed`` counts the streams that were closed."""

    def __init__(self, *deltas: Delta) -> None:
        self.deltas = deltas
        self.streams: list[AsyncGenerator[Delta, None]] = []
        self.closed = 0

    def stream(self, request: Request) -> AsyncGenerator[Delta, None]:
        self.streams.append(self._stream())
        return self.streams[-1]

    async def _stream(self) -> AsyncGenerator[Delta, None]:
        try:
            for delta in self.deltas:
                yield delta
        finally:
            self.closed += 1
