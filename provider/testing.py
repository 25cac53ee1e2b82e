"""A pytest plugin for testing agents built on this framework (installed as the ``cognitive_loop`` plugin),
and ``check_provider``, a conformance check any ``loop.Provider`` implementation can run.

Fixtures:

- ``scripted(*replies)`` — a ``Scripted`` provider; the test fails at teardown if replies were left unused,
  since that means the agent stopped earlier than the script expected (``allow_unused=True`` to permit it).
- ``function_provider(fn)`` — a ``Function`` provider.
- ``event_recorder(step_or_bus)`` — an ``EventRecorder`` capturing every event published from then on.
- ``no_model_calls`` — any HTTP request to a host other than loopback fails loudly, and the model API keys
  (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ...) are removed from the environment. Set
  ``cognitive_loop_offline = true`` in the pytest ini options to apply it to every test.

An ``async def`` test requesting one of these fixtures by name runs on anyio, as if marked ``@pytest.mark.anyio``,
with no ``anyio_mode`` needed; unless an async plugin runs it already: it is marked ``anyio``, ``asyncio`` or
``trio`` (itself, its class or module), or ``anyio_mode``/``asyncio_mode`` is ``auto`` or ``trio_mode`` is on.

The fixtures live in the plugin module pytest loads; importing this module needs no pytest (an application can
use ``check_provider`` and ``EventRecorder`` outside tests).

Conformance (in the spirit of ``trio.testing.check_one_way_stream``):

- ``await check_provider(make_provider)`` — raises ``ConformanceError`` naming the first way the providers
  ``make_provider`` makes break the ``loop.Provider`` contract.
"""

from __future__ import annotations

from typing import Any

from loop import LoopError, Subscription, TextDelta, ToolStarted, Turn, TurnCompleted
from loop.errors import ConformanceError
from provider._conformance import CONCURRENT_STREAMS, DELTA_TYPES, check_provider

__all__ = ["CONCURRENT_STREAMS", "DELTA_TYPES", "ConformanceError", "EventRecorder", "ModelCallBlocked", "check_provider"]

MODEL_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")


class ModelCallBlocked(LoopError):
    """Raised when a test tries to reach a host off this machine while real model calls are blocked."""


class EventRecorder:
    """Everything a bus published since the recorder subscribed, with helpers for common assertions."""

    def __init__(self, subscription: Subscription) -> None:
        self._subscription = subscription
        self._events: list[Any] = []

    @property
    def events(self) -> list[Any]:
        """Every event so far, oldest first."""
        self._events.extend(self._subscription.drain())
        return list(self._events)

    def of_type(self, *types: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, types)]

    @property
    def text(self) -> str:
        """All streamed text, joined."""
        return "".join(e.text for e in self.of_type(TextDelta))

    @property
    def tools_called(self) -> list[str]:
        """Names of the tools started, in order."""
        return [e.call.name for e in self.of_type(ToolStarted)]

    @property
    def turns(self) -> list[Turn]:
        """Turns completed (model turns, tool turns and submitted turns), in order."""
        return [e.turn for e in self.of_type(TurnCompleted)]

    def close(self) -> None:
        self._subscription.close()


_PLUGIN_NAMES = frozenset({"event_recorder", "function_provider", "no_model_calls", "scripted"})


def __getattr__(name: str) -> Any:
    # The fixtures, for code that imports them by name: loaded from the plugin (and so pytest) on first use.
    if name in _PLUGIN_NAMES:
        from provider import _pytest_plugin

        return getattr(_pytest_plugin, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
