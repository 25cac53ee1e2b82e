"""The ``Conduit`` protocol: how users reach a manager's sessions (a terminal, HTTP, an OpenAI-style API...)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from session._manager import Manager


@runtime_checkable
class Conduit(Protocol):
    """Connects users to the sessions of one ``Manager``.

    ``serve`` may assume the manager is running (inside ``async with manager:``) and must not close it. It
    runs until its users are done or it is cancelled; on cancellation it stops taking new requests, ends the
    streams it serves, releases what it opened (sockets, tasks) and re-raises. Turns in progress belong to the
    manager's sessions, not to the conduit, so stopping a conduit never cuts a turn short.
    """

    async def serve(self, manager: Manager) -> None: ...
