"""``python -m session`` gives every run the dependencies a module's ``make_deps()`` returns, and refuses a
``make_deps`` that cannot be called."""

from __future__ import annotations

import types

import pytest

from examples import approvals
from loop import UsageError
from session._cli import deps_of, parser


def test_a_modules_make_deps_is_called_once_for_the_runs() -> None:
    assert deps_of(approvals) == {"ledger": []}
    assert deps_of(types.ModuleType("plain")) is None, "a module without make_deps gives no dependencies"


def test_a_make_deps_that_is_not_a_function_is_refused() -> None:
    module = types.ModuleType("broken")
    module.make_deps = {"db": 1}  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="broken.make_deps must be a function"):
        deps_of(module)


def test_the_approval_flags_parse() -> None:
    args = parser().parse_args(["serve", "examples.approvals:make_agent", "--approval-timeout", "90",
                                "--openai-approvals", "allow"])
    assert args.approval_timeout == 90 and args.openai_approvals == "allow"
    assert parser().parse_args(["chat", "examples.approvals:make_agent"]).approval_timeout == 3600
    with pytest.raises(SystemExit):
        parser().parse_args(["serve", "examples.approvals:make_agent", "--openai-approvals", "maybe"])
