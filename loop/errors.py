"""The framework's exceptions, all raised from one base.

    LoopError                  base of everything the framework raises on purpose
    ├── UsageError             the framework was called wrongly (bad argument, wrong wiring, bad JSON)
    ├── ProviderError          a provider could not produce a response; carries status, body, retryable
    │   └── ScriptExhausted    a scripted provider was asked for more replies than it holds
    ├── StreamError            a provider's stream broke its contract (e.g. a delta of an unknown type)
    ├── BudgetExhausted        a budget ran out; carries the partial ``state``
    ├── VerificationError      a verifier reported ERROR (broken infrastructure); carries state and results
    └── VerificationFailed     verifiers still FAIL after every retry; carries the final state and results

Lower-level exceptions (httpx, sqlite, docker) are translated where they cross into the framework, with
``raise ... from exc`` so the original stays attached.

Tool failures are never raised: every tool call ends in a ``ToolResult`` (``is_error=True`` when it failed),
so the conversation stays valid to send back to a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loop._state import State

__all__ = [
    "BudgetExhausted",
    "LoopError",
    "ProviderError",
    "ScriptExhausted",
    "StreamError",
    "UsageError",
    "VerificationError",
    "VerificationFailed",
]


class LoopError(Exception):
    """Base class of every exception the framework raises on purpose."""


class UsageError(LoopError):
    """Raised when the framework is called wrongly: a bad argument, wrong wiring, unreadable input."""


class ProviderError(LoopError):
    """Raised when a provider cannot produce a response.

    ``status`` is the HTTP status when there was one, ``body`` an excerpt of what the server said, and
    ``retryable`` whether sending the same request again is safe and may succeed.
    """

    def __init__(
        self, message: str, *, status: int | None = None, body: str = "", retryable: bool = False
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.retryable = retryable


class ScriptExhausted(ProviderError):
    """Raised when a scripted provider is asked for a reply after its last one was used."""

    def __init__(self, message: str, *, used: int) -> None:
        super().__init__(message)
        self.used = used


class StreamError(LoopError):
    """Raised when a provider's stream breaks its contract (an unknown delta, a tool call without a name)."""


class _WithState(LoopError):
    def __init__(self, message: str, *, state: State) -> None:
        super().__init__(message)
        self.state = state


class BudgetExhausted(_WithState):
    """Raised when a budget (turns, tokens, time, money) runs out; ``state`` is the partial conversation."""


class _Verification(_WithState):
    def __init__(self, message: str, *, state: State, results: Sequence[Any]) -> None:
        super().__init__(message, state=state)
        self.results = tuple(results)


class VerificationError(_Verification):
    """Raised when a verifier reports ERROR: its infrastructure broke, so retrying the model cannot help."""


class VerificationFailed(_Verification):
    """Raised when verifiers still FAIL after every retry; carries the final ``state`` and ``results``."""
