"""The code-action example runs as a user would run it, in Docker and with --unsafe-local."""

import subprocess
import sys

import pytest

from loop import Role, State, Step, Text
from sandbox import SandboxConfig, UnsafeLocalSandbox
from tests.examples import ROOT, load_example
from tests.sandbox.docker_env import docker_config  # noqa: F401  (the fixture)

example = load_example("code_action")
ANSWER = "final answer: Buying every apple and pear costs 10.00 euros."


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "examples/code_action.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_runs_from_the_command_line_without_docker() -> None:
    done = run_example("--unsafe-local")
    assert done.returncode == 0, done.stderr
    assert "UnsafeLocalSandbox (a plain subprocess: NO isolation)" in done.stdout
    assert "Running on provider.Scripted" in done.stdout
    assert "tools.ToolError: price raised KeyError: 'apples'" in done.stdout  # the first program's bug
    assert ANSWER in done.stdout and "code action: {'attempts': 2, 'tool_calls': 7}" in done.stdout


@pytest.mark.docker
def test_runs_from_the_command_line_in_docker(docker_config: SandboxConfig) -> None:  # noqa: F811
    done = run_example()
    assert done.returncode == 0, done.stderr
    assert "DockerSandbox (no network, read-only root" in done.stdout
    assert ANSWER in done.stdout


async def test_the_buggy_program_is_repaired() -> None:
    step = Step(example.demo_provider())
    state = await example.make_agent(step, UnsafeLocalSandbox()).run(
        State().append(Role.USER, Text(example.QUESTION)))
    errors = [t for t in state if t.meta.get("kind") == "code_action_error"]
    assert len(errors) == 1 and "KeyError: 'apples'" in errors[0].text
    assert state.answer == "Buying every apple and pear costs 10.00 euros." and not state.degraded


async def test_a_sandbox_that_cannot_run_ends_the_example_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox import DockerSandbox

    monkeypatch.setattr(example, "DockerSandbox", lambda: DockerSandbox(SandboxConfig(image="missing-image:0")))
    with pytest.raises(SystemExit) as caught:  # not an exception group around it
        await example.main(False)
    message = str(caught.value.code)
    assert message.startswith("\nthe sandbox cannot run: ") and message.endswith("(or try --unsafe-local)")
