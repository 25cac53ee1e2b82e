"""MCTS resumes in a new process: a search killed mid-rollout (SIGKILL) goes on from its file checkpoint, and no
finished rollout runs again."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ITERATIONS = 6
BLOCK_AT = 4

# Runs MCTS on a deterministic model with FileCheckpoints(argv[1]); appends one JSON line per proposal request
# to argv[2] (its process, rollout, whether lessons were shown); blocks for good at the first proposal of rollout
# argv[3] (0: never), after logging {"blocked": rollout}; argv[4] rollouts in all. Prints the outcome data when
# the search answers.
DRIVER = r'''
import json, os, re, sys, time, zlib

import anyio

from cognitive import FileCheckpoints
from cognitive.search._mcts import MCTS
from loop import Role, State, Step, Text
from provider import Function

directory, log_path, block_at, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])


def log(entry):
    with open(log_path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"pid": os.getpid(), **entry}) + "\n")
        out.flush()
        os.fsync(out.fileno())


def scorer(state):
    last = [t.text for t in state if t.kind == "thought"][-1]
    return 0.2 + (zlib.crc32(last.encode()) % 60) / 100  # below 0.9: the search never stops early


def model(request):
    wanted = (request.options.output_schema or {}).get("properties", {})
    if "lesson" in wanted:
        return json.dumps({"lesson": "Check each step before the next."})
    if "thoughts" in wanted:
        rollout = int(re.search(r"rollout (\d+)", request.path)[1])
        if rollout == block_at:
            log({"blocked": rollout})
            time.sleep(120)  # killed meanwhile
        shown = any("Lessons from earlier attempts" in t.text for t in request.turns)
        log({"rollout": rollout, "lessons": shown})
        line = [t.text for t in request.turns if t.kind == "thought"]
        prefix = line[-1] + "." if line else ""
        return json.dumps({"thoughts": [{"text": prefix + c, "final": len(line) >= 3} for c in "abc"]})
    return "Answer: " + request.turns[-1].text.splitlines()[-1]


async def main():
    search = MCTS(Step(Function(model)), iterations=iterations, scorer=scorer, checkpoints=FileCheckpoints(directory))
    state = await search.run(State().append(Role.USER, Text("Make 24 from 4 4 6 8.")))
    print(json.dumps(state.outcome.data["MCTS"]))


anyio.run(main)
'''


def entries(log: pathlib.Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_search_killed_mid_rollout_resumes_in_a_new_process_without_repeating_a_rollout(
        tmp_path: pathlib.Path) -> None:
    driver, log, checkpoints = tmp_path / "driver.py", tmp_path / "log.jsonl", tmp_path / "checkpoints"
    driver.write_text(DRIVER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

    command = [sys.executable, str(driver), str(checkpoints), str(log)]
    first = subprocess.Popen([*command, str(BLOCK_AT), str(ITERATIONS)], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not any("blocked" in e for e in entries(log)):
            assert first.poll() is None, first.communicate()[1].decode()
            assert time.monotonic() < deadline, "the first process never reached the rollout it blocks in"
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=30)
        first.stdout.close()  # type: ignore[union-attr]
        first.stderr.close()  # type: ignore[union-attr]
    assert first.returncode == -signal.SIGKILL
    assert len(list(checkpoints.glob("*.json"))) == 1  # what it saved after its last finished rollout

    second = subprocess.run([*command, "0", str(ITERATIONS)], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert second.returncode == 0, second.stderr
    data = json.loads(second.stdout.strip().splitlines()[-1])

    logged = entries(log)
    pids = list(dict.fromkeys(e["pid"] for e in logged))
    assert pids == [first.pid, pids[-1]] and pids[-1] != first.pid
    before = [e["rollout"] for e in logged if e["pid"] == first.pid and "rollout" in e]
    after = [e for e in logged if e["pid"] == pids[-1]]
    assert sorted(set(before)) == list(range(1, BLOCK_AT))
    # The new process started at the rollout the old one was killed in: no finished rollout ran again.
    assert after[0]["rollout"] == BLOCK_AT
    assert sorted({e["rollout"] for e in after}) == list(range(BLOCK_AT, ITERATIONS + 1))
    assert after[0]["lessons"]  # the lessons the killed process learned came back with the tree
    assert data["rollouts"] == ITERATIONS and data["resumed_at"] == BLOCK_AT
    assert data["reflections"] and data["line"]
    assert not list(checkpoints.glob("*.json"))  # dropped once the search answered
