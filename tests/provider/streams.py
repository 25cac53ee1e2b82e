"""What the provider tests share: a one-message request, and the deltas a provider streams for it."""

from __future__ import annotations

from typing import Any

from loop import Request, Role, Text, Turn

REQUEST = Request((Turn(Role.USER, (Text("hi"),)),))


async def collect(provider: Any, request: Request = REQUEST) -> list[Any]:
    """Every delta ``provider`` streams for ``request``, in order."""
    return [delta async for delta in provider.stream(request)]
