"""``DockerSandbox``: the contract, the hardened container, removal in every case, the warm pool, the bridge."""

import time

import anyio
import attrs
import pytest

from loop import UsageError, tool
from sandbox import DockerSandbox, SandboxConfig, SandboxError, ToolBridge
from sandbox._engine import connect
from sandbox.testing import check_sandbox
from tests.sandbox.docker_env import our_containers, wait_until_no_containers
from tests.loop_gaps import loop_gaps
from tests.sandbox.run_shape import check_run_shape

pytestmark = pytest.mark.docker


@tool
async def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


async def test_it_keeps_the_sandbox_contract_cold(docker_config: SandboxConfig) -> None:
    await check_sandbox(lambda: DockerSandbox(docker_config))
    await wait_until_no_containers()


async def test_it_keeps_the_sandbox_contract_with_a_warm_pool(docker_config: SandboxConfig) -> None:
    await check_sandbox(lambda: DockerSandbox(docker_config, warm=2))
    await wait_until_no_containers()


async def test_the_running_container_is_locked_down(docker_config: SandboxConfig) -> None:
    config = attrs.evolve(docker_config, memory_mb=128, pids=32, cpus=0.5, workdir_mb=8, tmp_mb=4)
    sandbox = DockerSandbox(config)
    async with anyio.create_task_group() as group:
        group.start_soon(sandbox.exec, ["python3", "-c", "import time; time.sleep(60)"])
        with anyio.fail_after(20):
            while not (found := await anyio.to_thread.run_sync(our_containers)):
                await anyio.sleep(0.05)
        info = await anyio.to_thread.run_sync(connect().api.inspect_container, found[0]["Id"])
        group.cancel_scope.cancel()
    host = info["HostConfig"]
    assert host["NetworkMode"] == "none" and info["Config"]["NetworkDisabled"] is True
    assert host["ReadonlyRootfs"] is True and host["Privileged"] is False
    # The supervisor starts as root with these three only, starts the program as 65534, then becomes 65533.
    assert host["CapDrop"] == ["ALL"] and sorted(host["CapAdd"]) == ["SETGID", "SETPCAP", "SETUID"]
    assert host["SecurityOpt"][0] == "no-new-privileges:true" and host["SecurityOpt"][1].startswith("seccomp={")
    assert host["Memory"] == host["MemorySwap"] == 128 * 1024 * 1024
    assert (host["PidsLimit"], host["NanoCpus"]) == (32, 500_000_000)
    assert host["Tmpfs"] == {"/work": "rw,exec,nosuid,nodev,size=8m,mode=0700,uid=65534,gid=65534",
                             "/tmp": "rw,noexec,nosuid,nodev,size=4m,mode=1777",
                             "/dev/shm": "rw,noexec,nosuid,nodev,size=16m,mode=1777"}
    assert not host.get("Binds") and not host.get("Mounts") and not info["Mounts"]  # nothing of the host is mounted
    assert host["AutoRemove"] is True and host["LogConfig"]["Type"] == "none"
    assert info["Config"]["User"] == "0:0"
    await wait_until_no_containers()  # the cancelled run's container is removed too


async def test_a_command_sees_the_run_the_local_sandbox_gives(docker_config: SandboxConfig) -> None:
    run = await check_run_shape(DockerSandbox(attrs.evolve(docker_config, env={"MODE": "test"})), "python3",
                                ["MODE"])
    assert run["env"] == ["HOME", "LANG", "MODE", "PATH", "PYTHONDONTWRITEBYTECODE", "TMPDIR"]
    assert (run["cwd"], run["tmpdir"], run["stdin"]) == (docker_config.workdir, "/tmp", "")
    await wait_until_no_containers()


async def test_limits_are_in_force_inside(docker_config: SandboxConfig) -> None:
    config = attrs.evolve(docker_config, memory_mb=96, pids=40)
    code = ("print(open('/sys/fs/cgroup/memory/memory.limit_in_bytes').read().strip(),"
            " open('/sys/fs/cgroup/pids/pids.max').read().strip())")
    result = await DockerSandbox(config).exec(["python3", "-c", code])
    if result.exit_code != 0:  # a cgroup v2 host names the files differently
        code = "print(open('/sys/fs/cgroup/memory.max').read().strip(), open('/sys/fs/cgroup/pids.max').read().strip())"
        result = await DockerSandbox(config).exec(["python3", "-c", code])
    assert result.stdout.split() == [str(96 * 1024 * 1024), "40"]


async def test_containers_are_removed_after_every_kind_of_run(docker_config: SandboxConfig) -> None:
    sandbox = DockerSandbox(docker_config)
    await sandbox.exec(["python3", "-c", "print('fine')"])
    await sandbox.exec(["python3", "-c", "raise SystemExit(3)"])
    await sandbox.exec(["python3", "-c", "while True: pass"], timeout=0.5)
    await sandbox.exec(["no-such-command"])
    await wait_until_no_containers()


async def test_the_warm_pool_never_reuses_a_container(docker_config: SandboxConfig) -> None:
    code = ("import os, re\n"
            "seen = os.path.exists('/tmp/marker')\n"
            "open('/tmp/marker', 'w').write('x')\n"
            "cid = re.search(r'/docker/(\\w+)', open('/proc/self/cgroup').read()) or "
            "re.search(r'containers/(\\w+)/hostname', open('/proc/self/mountinfo').read())\n"
            "print(seen, cid.group(1))\n")
    async with DockerSandbox(docker_config, warm=2) as sandbox:
        await sandbox.wait_warm()
        results = [await sandbox.exec(["python3", "-c", code]) for _ in range(4)]
        assert all(r.stdout.split()[0] == "False" for r in results), [r.stdout for r in results]
        assert len({r.stdout.split()[1] for r in results}) == 4  # four runs, four containers
        with anyio.fail_after(30):
            await sandbox.wait_warm()  # used containers were replaced in the background
    await wait_until_no_containers()


async def test_a_warm_pool_needs_async_with(docker_config: SandboxConfig) -> None:
    sandbox = DockerSandbox(docker_config, warm=1)
    with pytest.raises(UsageError, match="async with DockerSandbox"):
        await sandbox.exec(["true"])
    with pytest.raises(UsageError, match="wait_warm needs"):
        await DockerSandbox(docker_config).wait_warm()
    async with sandbox:
        with pytest.raises(UsageError, match="already open"):
            await sandbox.__aenter__()
    await wait_until_no_containers()


async def test_a_missing_image_says_how_to_build_one(docker_config: SandboxConfig) -> None:
    sandbox = DockerSandbox(attrs.evolve(docker_config, image="cognitive-loop-sandbox:no-such-tag"))
    with pytest.raises(SandboxError, match="python -m sandbox build-image"):
        await sandbox.exec(["true"])


async def test_programs_call_host_tools_through_the_bridge(docker_sandbox: DockerSandbox) -> None:
    code = "from tools import add, final\nfinal(add(a=add(a=1, b=2), b=0.5))\n"
    result = await docker_sandbox.exec(["python3", "main.py"], files={"main.py": code},
                                       tools=ToolBridge([add]))
    assert result.ok, result.stderr
    assert result.stdout == "FINAL: 3.5\n" and result.tool_calls == 2


# -- output floods ---------------------------------------------------------------------------------------

FLOOD = "import os\nb = b'y' * 65536\nwhile True: os.write({fd}, b)"


@pytest.mark.slow
@pytest.mark.parametrize(("fd", "warm"), [(1, 0), (2, 0), (1, 1)], ids=["stdout", "stderr", "stdout-warm"])
async def test_an_output_flood_ends_at_the_timeout(docker_config: SandboxConfig, fd: int, warm: int) -> None:
    async with DockerSandbox(docker_config, warm=warm) as sandbox:
        if warm:
            await sandbox.wait_warm()
        started = time.perf_counter()
        result = await sandbox.exec(["python3", "-c", FLOOD.format(fd=fd)], timeout=3)
        elapsed = time.perf_counter() - started
    assert result.timed_out and result.exit_code == 137 and result.truncated
    assert elapsed < 3 + 2, f"the run ended {elapsed:.1f} s after it started, for a 3 s limit"
    await wait_until_no_containers()


@pytest.mark.slow
@pytest.mark.parametrize("fd", [1, 2], ids=["stdout", "stderr"])
async def test_an_output_flood_does_not_stall_the_event_loop(docker_sandbox: DockerSandbox, fd: int) -> None:
    await docker_sandbox.wait_warm()
    async with loop_gaps() as gaps:
        result = await docker_sandbox.exec(["python3", "-c", FLOOD.format(fd=fd)], timeout=3)
    assert result.timed_out and len(gaps) > 100
    assert max(gaps) <= 0.05, f"the event loop stalled for {max(gaps) * 1000:.0f} ms"
