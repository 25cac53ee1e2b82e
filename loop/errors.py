"""The framework's exceptions, all raised from one base.

    LoopError                      base of everything the framework raises on purpose
    ├── UsageError                 the framework was called wrongly (bad argument, wrong wiring, bad JSON)
    │   └── ApprovalMismatch           decisions do not answer exactly the calls waiting for approval
    ├── ProviderError              a provider could not produce a response; carries status, body, retryable
    │   ├── AuthenticationError        the key is missing, wrong or lacks permission (401, 403)
    │   ├── BadRequestError            the server rejected the request as sent (400, 404, 413, 422)
    │   ├── RateLimitError             too many requests (429); carries retry_after
    │   ├── ServerError                the server failed (5xx)
    │   │   └── OverloadedError        the server is overloaded (503, 529); carries retry_after
    │   ├── ProviderTimeout            connecting or reading took too long
    │   ├── ProviderUnreachable        no connection could be made
    │   ├── StreamError                the response stream broke its contract (cut short, malformed, unknown delta)
    │   └── ScriptExhausted            a scripted provider was asked for more replies than it holds
    ├── BudgetExhausted            a budget ran out; names the budget, carries the run's last ``state``
    ├── ToolDenied                 a call that needed approval was denied, where its value was wanted itself
    ├── VerificationError          a verifier reported ERROR (broken infrastructure); carries state and results
    ├── VerificationFailed         verifiers still FAIL after every retry; carries the final state and results
    └── ConformanceError           a conformance check (``*.testing.check_*``) found a contract broken

Every other package adds the errors it raises under these, and draws them in its own docstring (``provider``,
``cognitive``, ``sandbox``, ``session``): nothing here names them, so a new package or conduit never edits
this one.

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
    "ApprovalMismatch",
    "AuthenticationError",
    "ConformanceError",
    "BadRequestError",
    "BudgetExhausted",
    "LoopError",
    "OverloadedError",
    "ProviderError",
    "ProviderTimeout",
    "ProviderUnreachable",
    "RateLimitError",
    "ScriptExhausted",
    "ServerError",
    "StreamError",
    "ToolDenied",
    "UsageError",
    "VerificationError",
    "VerificationFailed",
]


class LoopError(Exception):
    """Base class of every exception the framework raises on purpose."""


class UsageError(LoopError):
    """Raised when the framework is called wrongly: a bad argument, wrong wiring, unreadable input."""


class ApprovalMismatch(UsageError):
    """Raised when decisions do not answer exactly the calls waiting for approval: other calls, some missing,
    or a call decided twice."""


class ToolDenied(LoopError):
    """Raised to a caller that wanted a tool's value itself (a code-action program's bridged call) when the call
    needed approval and was denied, or nobody could be asked."""


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


class AuthenticationError(ProviderError):
    """Raised when the provider refuses the credentials (HTTP 401 or 403)."""


class BadRequestError(ProviderError):
    """Raised when the provider rejects the request as sent (HTTP 400, 404, 413, 422); retrying cannot help."""


class RateLimitError(ProviderError):
    """Raised on HTTP 429; ``retry_after`` is the wait in seconds the server asked for, if it said."""

    def __init__(self, message: str, *, status: int | None = 429, body: str = "",
                 retry_after: float | None = None) -> None:
        super().__init__(message, status=status, body=body, retryable=True)
        self.retry_after = retry_after


class ServerError(ProviderError):
    """Raised when the provider fails on its side (HTTP 5xx); a retry may succeed."""

    def __init__(self, message: str, *, status: int | None = 500, body: str = "",
                 retry_after: float | None = None) -> None:
        super().__init__(message, status=status, body=body, retryable=True)
        self.retry_after = retry_after


class OverloadedError(ServerError):
    """Raised when the provider says it is overloaded (HTTP 503 or 529, or an overloaded error event)."""


class ProviderTimeout(ProviderError):
    """Raised when connecting to the provider or reading its response takes longer than allowed."""

    def __init__(self, message: str, *, status: int | None = None, body: str = "", retryable: bool = True) -> None:
        super().__init__(message, status=status, body=body, retryable=retryable)


class ProviderUnreachable(ProviderError):
    """Raised when no connection to the provider can be made (refused, DNS failure, TLS failure)."""

    def __init__(self, message: str, *, status: int | None = None, body: str = "", retryable: bool = True) -> None:
        super().__init__(message, status=status, body=body, retryable=retryable)


class StreamError(ProviderError):
    """Raised when a response stream breaks its contract: cut short, malformed, or an unknown delta."""


class ScriptExhausted(ProviderError):
    """Raised when a scripted provider is asked for a reply after its last one was used."""

    def __init__(self, message: str, *, used: int) -> None:
        super().__init__(message)
        self.used = used


class _WithState(LoopError):
    def __init__(self, message: str, *, state: State) -> None:
        super().__init__(message)
        self.state = state


class BudgetExhausted(LoopError):
    """Raised when a budget (turns, tool calls, tokens, time, money) runs out.

    ``budget`` is the ``loop.Budget`` that ran out (its ``name`` is in the message) and ``state`` the last
    state of the run's main line, when one is known. ``cognitive.WithBudget`` catches it and writes a final
    answer; it reaches a caller only when no answer can be written or the caller asked for it.
    """

    def __init__(self, message: str, *, state: State | None = None, budget: Any = None) -> None:
        super().__init__(message)
        self.state = state
        self.budget = budget
        self.spend: Any = None  # the live spend that ran out, for the WithBudget that owns it


class _Verification(_WithState):
    def __init__(self, message: str, *, state: State, results: Sequence[Any]) -> None:
        super().__init__(message, state=state)
        self.results = tuple(results)


class VerificationError(_Verification):
    """Raised when a verifier reports ERROR: its infrastructure broke, so retrying the model cannot help."""


class VerificationFailed(_Verification):
    """Raised when verifiers still FAIL after every retry; carries the final ``state`` and ``results``."""


class ConformanceError(LoopError):
    """Raised by a conformance check (``provider.testing.check_provider``, ``verifier.testing.check_verifier``,
    ``sandbox.testing.check_sandbox``, ``session.testing.check_store``) when an implementation breaks its
    protocol's contract; the message names the first rule broken."""
