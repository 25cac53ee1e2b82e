"""The drop-in model example, run as a user runs it: a typed answer and a client tool round trip over HTTP."""

import os
import subprocess
import sys

from tests.examples import ROOT

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}


def test_the_example_gets_a_typed_answer_and_runs_the_clients_tool() -> None:
    done = subprocess.run([sys.executable, "examples/drop_in_model.py"], cwd=ROOT, env={**ENV, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        'typed answer: {"city":"Oslo","forecast":"snow, -3 °C"}',
        'finish_reason=tool_calls: the model calls the client\'s notify({"text": "Oslo: snow, -3 \\u00b0C"})',
        "answer: I looked it up (snow, -3 °C) and sent the notification.",
    ]
