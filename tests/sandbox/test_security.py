"""Attacks on the Docker sandbox, each shown to be contained (not merely survived).

Network tests aim only at listeners this test starts on the host's 127.0.0.1, and at a name that cannot exist
(``example.invalid``); nothing here sends traffic off this machine.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.abc
import attrs
import pytest

from loop import tool
from sandbox import DockerSandbox, SandboxConfig, ToolBridge
from tests.sandbox.attacks import FLOOD, FORGE_IDS
from tests.sandbox.docker_env import wait_until_no_containers

pytestmark = pytest.mark.docker
ran: list[str] = []


@tool
async def add(a: float, b: float) -> float:
    """Add two numbers."""
    ran.append("add")
    return a + b


@tool
def read_note(path: str) -> str:
    """Read a note."""
    ran.append(f"read_note {path}")
    return "note"


async def run(sandbox: DockerSandbox, code: str, **kwargs: object):  # type: ignore[no-untyped-def]
    return await sandbox.exec(["python3", "-c", code], **kwargs)  # type: ignore[arg-type]


# -- network -------------------------------------------------------------------------------------------


async def test_no_network_interface_but_loopback_and_no_route(docker_sandbox: DockerSandbox) -> None:
    code = ("import json; print(json.dumps([[l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]],"
            " open('/proc/net/route').read().splitlines()[1:]]))")
    interfaces, routes = json.loads((await run(docker_sandbox, code)).stdout)
    assert interfaces == ["lo"] and routes == []


async def test_dns_fails(docker_sandbox: DockerSandbox) -> None:
    code = ("import socket\ntry:\n    socket.getaddrinfo('example.invalid', 80)\n    print('resolved')\n"
            "except socket.gaierror as exc:\n    print('gaierror', exc.errno)")
    result = await run(docker_sandbox, code)
    assert result.stdout.startswith("gaierror"), result.stdout


async def test_a_listener_on_the_hosts_loopback_cannot_be_reached(docker_sandbox: DockerSandbox) -> None:
    accepted: list[object] = []

    async def count(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            accepted.append(stream)

    async with await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0) as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with anyio.create_task_group() as group:
            group.start_soon(listener.serve, count)
            code = ("import socket\ns = socket.socket(); s.settimeout(5)\n"
                    f"try:\n    s.connect(('127.0.0.1', {port})); print('connected')\n"
                    "except OSError as exc:\n    print(type(exc).__name__)")
            result = await run(docker_sandbox, code)
            # The same listener is reachable from the host: the refusal inside is the sandbox's doing.
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
            with anyio.fail_after(5):
                while not accepted:
                    await anyio.sleep(0.01)
            group.cancel_scope.cancel()
    assert result.stdout.strip() == "ConnectionRefusedError"
    assert len(accepted) == 1  # only the host's own connection


# -- the host's files, environment and Docker socket -----------------------------------------------------


async def test_host_files_are_not_visible(docker_sandbox: DockerSandbox, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret")
    host_name = Path("/etc/hostname").read_text()
    code = ("import json, os; print(json.dumps([open('/etc/hostname').read(), os.path.exists(%r), "
            "os.path.exists('/work/main'), [l.split()[4] for l in open('/proc/self/mountinfo')]]))" % str(secret))
    hostname, sees_secret, sees_repo, mounts = json.loads((await run(docker_sandbox, code)).stdout)
    assert hostname == "sandbox\n" and hostname != host_name
    assert not sees_secret and not sees_repo
    # Only the container's own filesystems: no bind mount of a host directory.
    assert set(mounts) - {"/", "/proc", "/dev", "/dev/pts", "/sys", "/dev/mqueue", "/dev/shm", "/tmp", "/work",
                          "/etc/resolv.conf", "/etc/hostname", "/etc/hosts"} <= {
        m for m in mounts if m.startswith(("/proc/", "/sys/"))}


async def test_the_hosts_environment_secrets_are_not_passed_in(docker_config: SandboxConfig,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_TEST_SECRET", "hunter2-docker")
    # The supervisor's own environment (PID 1) is out of the program's reach; were it not, it holds no secret.
    code = ("import os; print(repr(dict(os.environ)))\ntry:\n    print(open('/proc/1/environ').read())\n"
            "except PermissionError:\n    print('PID 1 refused')")
    result = await run(DockerSandbox(docker_config), code)
    assert result.ok and "hunter2-docker" not in result.stdout and "SANDBOX_TEST_SECRET" not in result.stdout


async def test_the_docker_socket_is_not_there(docker_sandbox: DockerSandbox) -> None:
    code = ("import os; print([p for p in ('/var/run/docker.sock', '/run/docker.sock', '/var/run/docker') "
            "if os.path.exists(p)], 'docker.sock' in open('/proc/self/mountinfo').read())")
    assert (await run(docker_sandbox, code)).stdout.strip() == "[] False"


# -- the filesystem -------------------------------------------------------------------------------------


async def test_the_root_filesystem_is_read_only(docker_sandbox: DockerSandbox) -> None:
    # /var/tmp and /run/lock are world-writable in the image: only the read-only mount stops the writes there.
    code = ("import errno\nfor path in ('/evil', '/var/tmp/x', '/run/lock/x', '/etc/passwd'):\n"
            "    try:\n        open(path, 'a').write('x')\n        print(path, 'written')\n"
            "    except OSError as exc:\n        print(path, errno.errorcode[exc.errno])\n"
            "open('/work/ok', 'w').write('x'); open('/tmp/ok', 'w').write('x'); print('tmpfs ok')")
    lines = (await run(docker_sandbox, code)).stdout.splitlines()
    assert lines[:3] == ["/evil EROFS", "/var/tmp/x EROFS", "/run/lock/x EROFS"]
    assert lines[3] in ("/etc/passwd EACCES", "/etc/passwd EROFS")  # not root: refused before the mount check
    assert lines[4] == "tmpfs ok"


async def test_the_temporary_filesystems_are_size_capped(docker_config: SandboxConfig) -> None:
    sandbox = DockerSandbox(attrs.evolve(docker_config, tmp_mb=8, workdir_mb=8, shm_mb=8))
    code = ("import errno\nfor d in ('/tmp', '/work', '/dev/shm'):\n    try:\n        f = open(d + '/fill', 'wb')\n"
            "        for _ in range(64): f.write(b'x' * (1 << 20)); f.flush()\n        print(d, 'full write')\n"
            "    except OSError as exc:\n        print(d, errno.errorcode[exc.errno])")
    assert (await run(sandbox, code)).stdout.splitlines() == ["/tmp ENOSPC", "/work ENOSPC", "/dev/shm ENOSPC"]


async def test_dev_shm_works_for_what_needs_it_and_nothing_runs_from_it(docker_sandbox: DockerSandbox) -> None:
    code = ("import multiprocessing, os, shutil, subprocess\nlock = multiprocessing.Lock()\n"
            "with lock:\n    print('semaphore ok', shutil.disk_usage('/dev/shm').total // (1 << 20))\n"
            "shutil.copy('/bin/true', '/dev/shm/true')\n"
            "try:\n    subprocess.run(['/dev/shm/true'])\nexcept PermissionError:\n    print('noexec')")
    assert (await run(docker_sandbox, code)).stdout.splitlines() == ["semaphore ok 16", "noexec"]


# -- resources -------------------------------------------------------------------------------------------


async def test_the_pids_limit_holds_against_forking(docker_config: SandboxConfig) -> None:
    code = ("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(30)\n"
            "            os._exit(0)\n        n += 1\nexcept OSError as exc:\n    print(n, type(exc).__name__)")
    result = await run(DockerSandbox(attrs.evolve(docker_config, pids=32)), code, timeout=30)
    forked, error = result.stdout.split()
    assert error == "BlockingIOError" and 0 < int(forked) < 32


async def test_a_fork_bomb_is_contained_and_ended(docker_config: SandboxConfig) -> None:
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = await run(DockerSandbox(attrs.evolve(docker_config, pids=32)), code, timeout=3)
    assert result.timed_out and result.exit_code == 137
    await wait_until_no_containers()  # every process died with its container
    assert subprocess.run([sys.executable, "-c", "print('host fine')"], capture_output=True, text=True,
                          timeout=30).stdout == "host fine\n"


async def test_a_memory_bomb_is_oom_killed_and_reported(docker_config: SandboxConfig) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))"
    result = await run(DockerSandbox(attrs.evolve(docker_config, memory_mb=64)), code, timeout=60)
    assert result.oom_killed and result.exit_code == 137 and not result.timed_out
    assert "out-of-memory killer" in result.stderr


async def test_a_cpu_loop_is_killed_at_the_timeout(docker_sandbox: DockerSandbox) -> None:
    result = await run(docker_sandbox, "while True: pass", timeout=1)
    assert result.timed_out and result.exit_code == 137 and not result.ok
    assert "ran past its 1 s timeout" in result.stderr


async def test_an_output_flood_is_capped_with_a_note(docker_config: SandboxConfig) -> None:
    sandbox = DockerSandbox(attrs.evolve(docker_config, max_output_bytes=100_000))
    code = ("import sys\nfor i in range(200_000): print(i)\nsys.stderr.write('E' * 500_000)\nprint('LAST')")
    result = await run(sandbox, code, timeout=60)
    assert result.ok and result.truncated
    assert result.stdout.startswith("0\n1\n2\n") and result.stdout.endswith("199999\nLAST\n")
    assert "[output truncated: the program wrote 1,288,895 bytes to stdout" in result.stdout
    assert "bytes to stderr" in result.stderr and len(result.stdout) < 101_000


# -- privileges ------------------------------------------------------------------------------------------


async def test_no_capabilities_no_new_privileges_and_not_root(docker_sandbox: DockerSandbox) -> None:
    code = ("import os, json\nstatus = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines()"
            " if ':\\t' in l)\ntry:\n    os.setuid(0)\n    became = 'root'\nexcept PermissionError:\n"
            "    became = 'refused'\nprint(json.dumps({k: status[k].strip() for k in ('CapEff', 'CapPrm', 'CapBnd', "
            "'CapAmb', 'NoNewPrivs', 'Uid', 'Gid')} | {'setuid': became}))")
    status = json.loads((await run(docker_sandbox, code)).stdout)
    assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == status["CapAmb"] == "0000000000000000"
    assert status["NoNewPrivs"] == "1" and status["setuid"] == "refused"
    assert status["Uid"].split() == ["65534"] * 4 and status["Gid"].split() == ["65534"] * 4


async def test_a_setuid_root_binary_gives_no_privilege(docker_sandbox: DockerSandbox) -> None:
    # su is setuid root in the image. Once it runs (and waits for a password), its uids are all still 65534.
    code = ("import os, subprocess, time, json\nst = os.stat('/usr/bin/su')\n"
            "p = subprocess.Popen(['su', 'root', '-c', 'id'], stdin=subprocess.PIPE, stdout=subprocess.PIPE,"
            " stderr=subprocess.PIPE)\n"
            "while True:\n    status = dict(l.split(':\\t', 1) for l in open('/proc/%d/status' % p.pid).read()"
            ".splitlines() if ':\\t' in l)\n"
            "    if status['Name'].strip() == 'su' and status['State'].startswith('S'):\n        break\n"
            "    time.sleep(0.01)\n"
            "p.kill(); p.wait()\n"
            "print(json.dumps([bool(st.st_mode & 0o4000), st.st_uid, status['Uid'].split()]))")
    setuid_bit, owner, uids = json.loads((await run(docker_sandbox, code, timeout=20)).stdout)
    assert setuid_bit and owner == 0  # a genuine setuid-root program...
    assert uids == ["65534"] * 4  # ...running without root: real, effective, saved and filesystem uid


# -- the supervisor ------------------------------------------------------------------------------------

# Tries every way the program could reach its supervisor (PID 1) to forge its result, then exits 9 for real.
FORGE_RESULT = r"""
import ctypes, errno, json, os, signal, struct, sys
tried = {}
def attempt(name, action):
    try:
        action()
        tried[name] = "done"
    except OSError as exc:
        tried[name] = errno.errorcode.get(exc.errno, str(exc.errno))
def frames():
    with open("/proc/1/fd/1", "wb", buffering=0) as out:
        for kind, payload in ((b"O", b"forged stdout\n"), (b"X", b'{"exit_code": 0, "oom_kills": 0}')):
            out.write(kind + struct.pack(">I", len(payload)) + payload)
libc = ctypes.CDLL(None, use_errno=True)
def ptrace_attach():
    if libc.ptrace(16, 1, 0, 0) != 0:  # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), "ptrace")
attempt("mem", lambda: open("/proc/1/mem", "r+b").close())
attempt("frames", frames)
attempt("ptrace", ptrace_attach)
attempt("signal", lambda: os.kill(1, signal.SIGSTOP))
print(json.dumps(tried))
sys.exit(9)
"""


async def test_the_program_cannot_forge_its_result(docker_sandbox: DockerSandbox) -> None:
    result = await run(docker_sandbox, FORGE_RESULT)
    assert result.exit_code == 9 and not result.ok, result  # the truth, from the engine
    tried = json.loads(result.stdout)  # the program's real output, and nothing forged
    assert set(tried) == {"mem", "frames", "ptrace", "signal"} and "done" not in tried.values(), tried


async def test_the_supervisor_runs_as_another_user_the_program_cannot_reach(docker_sandbox: DockerSandbox) -> None:
    code = ("import json, os\ndef ids(pid):\n    status = open('/proc/%s/status' % pid).read().splitlines()\n"
            "    return {l.split(':')[0]: l.split()[1:] for l in status if l.startswith(('Uid', 'Gid', 'CapEff', "
            "'CapPrm'))}\nprint(json.dumps([ids(1), ids('self'), os.stat('/proc/1/fd').st_uid]))")
    supervisor, program, fd_owner = json.loads((await run(docker_sandbox, code)).stdout)
    assert supervisor == {"Uid": ["65533"] * 4, "Gid": ["65533"] * 4, "CapPrm": ["0000000000000000"],
                          "CapEff": ["0000000000000000"]}
    assert program["Uid"] == ["65534"] * 4 and program["Gid"] == ["65534"] * 4
    assert fd_owner == 0  # the supervisor is not dumpable: its /proc entries belong to root


async def test_the_seccomp_profile_denies_ptrace_and_reading_or_writing_another_process(
        docker_sandbox: DockerSandbox) -> None:
    # Against the program's own child, which it could reach as far as users go: only the profile stops it.
    code = r"""
import ctypes, errno, json, os, time
libc = ctypes.CDLL(None, use_errno=True)
class IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
buffer = ctypes.create_string_buffer(8)
vector = IOVec(ctypes.addressof(buffer), 8)
calls = {"ptrace": lambda: libc.ptrace(16, child, 0, 0),
         "process_vm_readv": lambda: libc.process_vm_readv(child, ctypes.byref(vector), 1, ctypes.byref(vector), 1, 0),
         "process_vm_writev": lambda: libc.process_vm_writev(child, ctypes.byref(vector), 1, ctypes.byref(vector), 1,
                                                             0),
         "unshare_user_namespace": lambda: libc.unshare(0x10000000)}
print(json.dumps({name: errno.errorcode.get(ctypes.get_errno()) if call() == -1 else "done"
                  for name, call in calls.items()}))
os.kill(child, 9)
"""
    assert json.loads((await run(docker_sandbox, code)).stdout) == {
        "ptrace": "EPERM", "process_vm_readv": "EPERM", "process_vm_writev": "EPERM",
        "unshare_user_namespace": "EPERM"}


# -- the tool bridge -----------------------------------------------------------------------------------


async def test_a_bridge_flood_past_the_cap_runs_the_tool_only_up_to_the_cap(docker_sandbox: DockerSandbox) -> None:
    ran.clear()
    result = await docker_sandbox.exec(["python3", "-c", FLOOD], tools=ToolBridge([add], max_tool_calls=30))
    assert result.ok and result.stdout.split() == ["30", "470"]
    assert ran == ["add"] * 30 and result.tool_calls == 500


async def test_forged_ids_and_path_traversal_are_refused(docker_sandbox: DockerSandbox) -> None:
    ran.clear()
    result = await docker_sandbox.exec(["python3", "-c", FORGE_IDS], tools=ToolBridge([add, read_note]))
    answers = json.loads(result.stdout)
    assert [a["ok"] for a in answers] == [True, False, False, False, False, False, True]
    assert {a["error"]["type"] for a in answers[1:6]} == {"ToolCallRefused"}
    assert ran == ["add", "add"]  # the replayed, forged and traversing requests ran nothing


async def test_nothing_is_left_behind() -> None:
    await wait_until_no_containers()
    assert os.getpid() > 0
