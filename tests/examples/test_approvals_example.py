"""examples/approvals.py runs as a user runs it, offline: a small refund runs at once, a large one waits for a
person, and the approved refund runs for the caller who asked."""

import subprocess
import sys

from examples import approvals
from loop import Caller, RunContext
from tests.examples import ROOT


def test_runs_from_the_command_line_offline() -> None:
    done = subprocess.run([sys.executable, "examples/approvals.py"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Running on the offline demo model") and not done.stderr
    lines = done.stdout.splitlines()
    assert "order 7: Done: refunded 12 on order 7 (asked by ada)." in lines
    assert 'order 42 waits for approval: refund({"order_id": "42", "amount": 120})' in lines
    assert "order 42: Done: refunded 120 on order 42 (asked by ada)." in lines
    assert "ledger: [('7', 12, 'ada'), ('42', 120, 'ada')]" in lines


def test_the_policy_asks_only_for_large_refunds_by_callers_without_the_role() -> None:
    anyone = RunContext(Caller("ada", "shop"))
    clerk = RunContext(Caller("bo", "shop", {"roles": ["refunds"]}))
    assert approvals.over_limit(anyone, "refund", {"order_id": "42", "amount": 120})
    assert not approvals.over_limit(anyone, "refund", {"order_id": "7", "amount": 12})
    assert not approvals.over_limit(clerk, "refund", {"order_id": "42", "amount": 120})
    assert approvals.over_limit(RunContext(), "refund", {"order_id": "42", "amount": 51}), "nobody named: ask"
