"""``loop.errors``: one base, a drawn tree, and the context each failure carries."""

import inspect

import pytest

import loop
from loop import Role, State, Step, Text, errors
from loop.errors import (
    BudgetExhausted,
    LoopError,
    ProviderError,
    RateLimitError,
    ScriptExhausted,
    ServerError,
    VerificationError,
    VerificationFailed,
)
from provider import Scripted

PUBLIC = {name: obj for name, obj in vars(errors).items()
          if inspect.isclass(obj) and issubclass(obj, BaseException) and not name.startswith("_")}


def drawn_tree(doc: str | None = None) -> dict[str, str | None]:
    """Each class named in a docstring's tree (``loop.errors``' by default, where every indented line is one),
    mapped to the class drawn as its parent."""
    doc = errors.__doc__ if doc is None else doc
    assert doc is not None
    parents: dict[str, str | None] = {}
    stack: list[str] = []
    for line in doc.splitlines():
        if not line.startswith("    ") or not line.strip():
            continue
        start = next(i for i, ch in enumerate(line) if ch.isalpha())
        depth = (start - 4) // 4
        name = line[start:].split()[0]
        del stack[depth:]
        parents[name] = stack[-1] if stack else None
        stack.append(name)
    return parents


def public_parent(cls: type) -> str | None:
    """The nearest ancestor of ``cls`` that is a public class of ``loop.errors``."""
    for base in cls.__mro__[1:]:
        if base.__name__ in PUBLIC:
            return base.__name__
    return None


def test_the_module_exports_every_public_error() -> None:
    assert sorted(PUBLIC) == sorted(errors.__all__)
    assert loop.LoopError is LoopError and loop.UsageError is errors.UsageError


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_error_derives_from_loop_error_is_documented_and_drawn_where_it_sits(name: str) -> None:
    cls = PUBLIC[name]
    assert issubclass(cls, LoopError)
    assert cls.__doc__, f"{name} needs a docstring"
    tree = drawn_tree()
    assert name in tree, f"{name} is missing from the tree in loop/errors.py's docstring"
    assert tree[name] == public_parent(cls)


def test_the_tree_draws_every_error_of_this_module() -> None:
    assert set(PUBLIC) <= set(drawn_tree())  # the others, of other packages, are checked in tests/test_errors_tree.py


def test_provider_error_carries_status_body_and_retryable() -> None:
    error = ProviderError("bad gateway", status=502, body="<html>oops</html>", retryable=True)
    assert str(error) == "bad gateway"
    assert (error.status, error.body, error.retryable) == (502, "<html>oops</html>", True)
    plain = ProviderError("no connection")
    assert (plain.status, plain.body, plain.retryable) == (None, "", False)


def test_rate_limit_and_server_errors_are_retryable_and_carry_retry_after() -> None:
    limited = RateLimitError("slow down", retry_after=2.5)
    assert (limited.status, limited.retryable, limited.retry_after) == (429, True, 2.5)
    failed = ServerError("boom", status=503, body="down")
    assert (failed.status, failed.body, failed.retryable, failed.retry_after) == (503, "down", True, None)


async def test_script_exhausted_carries_how_many_replies_were_used() -> None:
    step = Step(Scripted(["only one"]))
    state = await step.turn(State().append(Role.USER, Text("a")))
    with pytest.raises(ScriptExhausted, match="ran out of replies") as caught:
        await step.turn(state.append(Role.USER, Text("b")))
    assert caught.value.used == 1
    assert isinstance(caught.value, ProviderError) and not caught.value.retryable


def test_budget_exhausted_carries_the_partial_state() -> None:
    partial = State().append(Role.USER, Text("q")).append(Role.ASSISTANT, Text("so far")).degrade("token budget")
    error = BudgetExhausted("token budget spent", state=partial)
    assert error.state is partial and str(error) == "token budget spent"


@pytest.mark.parametrize("cls", [VerificationFailed, VerificationError])
def test_verification_errors_carry_state_and_results(cls: type) -> None:
    final = State().append(Role.ASSISTANT, Text("done"))
    error = cls("tests still fail", state=final, results=["r1", "r2"])
    assert error.state is final
    assert error.results == ("r1", "r2")
    assert not issubclass(VerificationFailed, VerificationError)
