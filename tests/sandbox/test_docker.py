"""``DockerSandbox``: the contract, the hardened container, removal in every case, the warm pool, the bridge."""

import anyio
import attrs
import pytest

from loop import UsageError, tool
from sandbox import DockerSandbox, SandboxConfig, SandboxError, ToolBridge
from sandbox._engine import connect
from sandbox.testing import check_sandbox
from tests.sandbox.docker_env import our_containers, wait_until_no_containers
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
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["SecurityOpt"] == ["no-new-privileges:true"]
    assert host["Memory"] == host["MemorySwap"] == 128 * 1024 * 1024
    assert (host["PidsLimit"], host["NanoCpus"]) == (32, 500_000_000)
    assert host["Tmpfs"] == {"/work": "rw,exec,nosuid,nodev,size=8m,mode=0700,uid=65534,gid=65534",
                             "/tmp": "rw,noexec,nosuid,nodev,size=4m,mode=1777"}
    assert not host.get("Binds") and not host.get("Mounts") and not info["Mounts"]  # nothing of the host is mounted
    assert host["AutoRemove"] is True and host["LogConfig"]["Type"] == "none"
    assert info["Config"]["User"] == "65534:65534"
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
