"""Who a run works for, and what the application hands it: the caller and the run's dependencies.

A conduit knows who is asking (the bearer token's namespace, the user at a terminal); the application knows what
its tools need (a database handle, settings). Neither belongs in the conversation, and neither may come from the
model. Both travel in a context variable beside the run scope, set around a run by whoever starts it (a session
sets it for each message), so every nested pattern, branch and tool call of that run sees the same context
without passing it along.

A tool reads it by declaring a parameter annotated ``RunContext`` (or ``RunContext[MyDeps]``): ``@tool`` leaves
that parameter out of the JSON schema the model sees, the argument checker refuses it if a model sends it, and
the call receives the current context. The caller is therefore never something the model wrote.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any, Generic, TypeVar, get_origin

import attrs

from loop.errors import UsageError

D = TypeVar("D")


def _claims(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if value is None:
        return types.MappingProxyType({})
    if not isinstance(value, Mapping):
        raise UsageError(f"Caller claims must be a mapping of names to values, got {type(value).__name__}")
    return types.MappingProxyType(dict(value))


def _text(name: str) -> Any:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if not isinstance(value, str) or (name == "id" and not value):
            wanted = "a non-empty string" if name == "id" else "a string"
            raise UsageError(f"Caller {name} must be {wanted}, got {value!r}")
    return check


@attrs.frozen
class Caller:
    """Who is asking: set by the conduit a message arrived through, never by model output.

    ``id`` names the caller (the token's namespace over HTTP, the user at a terminal); ``namespace`` is the
    space their sessions live in (a bearer token's namespace: two tokens never share one); ``claims`` are what
    the conduit vouches for beyond that (a verified e-mail, a role), read-only.
    """

    id: str = attrs.field(validator=_text("id"))
    namespace: str = attrs.field(default="", validator=_text("namespace"))
    claims: Mapping[str, Any] = attrs.field(factory=dict, converter=_claims, hash=False)  # compared, not hashed

    def to_dict(self) -> dict[str, Any]:
        """Its JSON form, as a session stores it with a message."""
        return {"id": self.id, "namespace": self.namespace, "claims": dict(self.claims)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Caller:
        """The caller ``to_dict`` wrote."""
        return cls(data["id"], data.get("namespace", ""), data.get("claims") or {})


@attrs.frozen
class RunContext(Generic[D]):
    """What a run works for: its ``caller`` (``None`` when nobody said), the application's ``deps`` (``None``
    when none were given) and the ``conversation`` it answers in (a session's id; ``None`` outside a session). A
    tool receives it by declaring a parameter annotated ``RunContext``."""

    caller: Caller | None = None
    deps: D | None = None
    conversation: str | None = None


_CURRENT: ContextVar[RunContext[Any]] = ContextVar("cognitive_loop.run_context", default=RunContext())
_UNSET: Any = object()


def current_run_context() -> RunContext[Any]:
    """The context of the run this code is part of (an empty ``RunContext`` outside any)."""
    return _CURRENT.get()


@contextlib.contextmanager
def run_context(*, caller: Caller | None = _UNSET, deps: Any = _UNSET,
                conversation: str | None = _UNSET) -> Iterator[RunContext[Any]]:
    """Run the block for ``caller`` with ``deps``, in ``conversation``; a field not given keeps the enclosing
    context's value.

    Everything started inside (patterns, branches, tool calls, tasks of anyio task groups) sees it; the previous
    context comes back when the block ends.
    """
    if caller is not _UNSET and caller is not None and not isinstance(caller, Caller):
        raise UsageError(f"run_context(caller=...) takes a loop.Caller, got {type(caller).__name__}")
    if conversation is not _UNSET and conversation is not None and (not isinstance(conversation, str)
                                                                     or not conversation):
        raise UsageError(f"run_context(conversation=...) takes a conversation id (a non-empty string) or None, "
                         f"got {conversation!r}")
    outer = _CURRENT.get()
    inner: RunContext[Any] = RunContext(outer.caller if caller is _UNSET else caller,
                                        outer.deps if deps is _UNSET else deps,
                                        outer.conversation if conversation is _UNSET else conversation)
    token = _CURRENT.set(inner)
    try:
        yield inner
    finally:
        _CURRENT.reset(token)


def is_run_context(hint: Any) -> bool:
    """Whether a parameter annotated ``hint`` receives the run context (``RunContext`` or ``RunContext[X]``)."""
    return hint is RunContext or get_origin(hint) is RunContext
