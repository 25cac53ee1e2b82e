"""The supervisor: the one process the host starts inside a sandbox. Its source is shipped as ``python3 -c``.

It is never imported by the host. It must run on any Python 3.9+ with the standard library only, since it
runs on whatever interpreter the sandbox image has.

Host to supervisor (its standard input): ASCII JSON lines. The first line is the job; every later line is an
answer to a tool call, handed to the program unchanged. Plain ASCII keeps the stream clear of the bytes a
terminal layer could take for control keys.

Supervisor to host (its standard output): frames of one kind byte, a 4-byte big-endian length and a payload:
``O`` program stdout, ``E`` program stderr, ``C`` one tool-call request line, ``X`` the exit report (JSON).
After the report it waits for the host to hang up, then exits with the program's status: the host takes the
status from the engine, which saw this process exit, not from a frame.

The program runs as a child with its own pipes for stdin, stdout and stderr, so nothing it prints can reach
the frame stream. Tool calls travel over two more pipes whose numbers are in ``SANDBOX_BRIDGE_FDS``.

Users. In a container the job names two (``user`` and ``supervisor_user``), and this process starts as root
with no capability but SETUID, SETGID and SETPCAP. It empties the capability bounding set the program will
inherit, writes the files and starts the program as the program's user, then becomes its own user for good,
which ends every capability it held and makes it non-dumpable. The program, under another uid and a seccomp
profile, then cannot ptrace this process, open its memory or descriptors under ``/proc/1``, or signal it, so
it cannot forge the frames. Without those fields (the local sandbox) nothing is switched. The host checks
every frame all the same.
"""

import base64
import errno
import json
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

MAX_CALL_LINE = 1 << 20  # a request line longer than this is cut and reported as malformed
GRACE = 1.0  # seconds to wait for the output pipes to close after the program exits
PR_SET_DUMPABLE, PR_CAPBSET_DROP = 4, 24
_write_lock = threading.Lock()
# Where the host's answer lines go (the program's end of the bridge), and the exit status once it is known.
_host: dict = {"answers": None, "status": None}


def send(kind, payload):
    data = kind + struct.pack(">I", len(payload)) + payload
    with _write_lock:
        view = memoryview(data)
        while view:
            written = os.write(1, view)
            view = view[written:]


def pump(fd, kind):
    """Copy one of the program's output pipes into frames until it closes."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        if not chunk:
            return
        send(kind, chunk)


def relay_calls(reader):
    """Forward each request line the program writes to the host, one ``C`` frame per line."""
    while True:
        line = reader.readline(MAX_CALL_LINE + 1)
        if not line:
            return
        if not line.endswith(b"\n"):
            # Too long: drop the rest of the line and tell the host, which refuses it.
            rest = line
            while rest and not rest.endswith(b"\n"):
                rest = reader.readline(MAX_CALL_LINE)
            line = b"{}"
        send(b"C", line.rstrip(b"\n"))


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def feed_fd(fd, data):
    """Write the program's standard input and close it."""
    try:
        write_all(fd, data)
    except OSError:
        pass  # the program stopped reading its input: that is its business
    finally:
        os.close(fd)


def safe_path(root, relative):
    """``relative`` resolved under ``root``, or ValueError when it would leave it."""
    parts = relative.replace("\\", "/").split("/")
    if relative.startswith(("/", "\\")) or "\x00" in relative or ".." in parts or not relative.strip("/"):
        raise ValueError("unsafe path %r" % relative)
    return os.path.join(root, *[p for p in parts if p not in ("", ".")])


def write_files(root, files):
    for relative, encoded in files:
        path = safe_path(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = base64.b64decode(encoded)
        mode = 0o755 if data.startswith(b"#!") else 0o644
        # O_NOFOLLOW: a link planted earlier in the run must not redirect a write.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), mode)
        try:
            write_all(fd, data)
        finally:
            os.close(fd)


def oom_kills():
    """How many processes the kernel's OOM killer has ended in this cgroup (v1 or v2), or -1 if unknown."""
    for path in ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"):
        try:
            with open(path) as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return -1


def prefer_to_be_killed(pid):
    """If memory runs out, the kernel should end the program, not the supervisor that reports what happened.

    Raising a process's score needs no privilege when acting as its user, as the supervisor does at the start.
    """
    try:
        with open("/proc/%d/oom_score_adj" % pid, "w") as handle:
            handle.write("1000")
    except OSError:
        pass


def thread(target, *args):
    worker = threading.Thread(target=target, args=args, daemon=True)
    worker.start()
    return worker


def read_job():
    idle = float(os.environ.get("SANDBOX_IDLE_TTL", "0") or 0)
    if idle > 0:
        # A warm container waits for its one job; if its owner never comes back it ends itself.
        ready, _, _ = select.select([0], [], [], idle)
        if not ready:
            sys.exit(0)
    line = sys.stdin.buffer.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def prctl(option, value):
    """``prctl(2)``; raises OSError when it fails."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def clear_bounding_set():
    """Empty this thread's capability bounding set, which the program inherits: no capability is ever in reach."""
    for cap in range(64):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: no such capability on this kernel
                raise


def act_as(user):
    """As root: take the program's user as the effective one, for its files and its start; root stays reachable."""
    uid, gid = user
    os.setgroups([])
    clear_bounding_set()
    os.setegid(gid)
    os.seteuid(uid)


def become(user):
    """Be ``user`` for good (real, effective and saved ids), which ends every capability this process held."""
    uid, gid = user
    if os.geteuid() != 0:
        os.seteuid(0)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise OSError(errno.EPERM, "the user did not change")
    # The kernel usually does this on the change of user; make sure: /proc/1 then belongs to root.
    prctl(PR_SET_DUMPABLE, 0)


def start(job):
    """Write the files, start the relay threads, then the program. Returns (child, output pumps, failure).

    The threads start first: the program may use up the pids limit at once (a fork bomb), after which no new
    thread could start, and the run would end without a report.
    """
    root = job["cwd"]
    user = job.get("user")
    try:
        os.makedirs(root, exist_ok=True)
        write_files(root, job.get("files", []))
    except (OSError, ValueError) as exc:
        return None, [], (126, "cannot write the files into %s: %s" % (root, exc))
    try:
        # Private as promised: some runtimes give a tmpfs the mode of the image's directory beneath it.
        os.chmod(root, 0o700)
    except OSError:
        pass
    env = dict(job.get("env", {}))
    keep = []  # the child's ends of the pipes, closed here once it holds them
    if job.get("stub") is not None:
        stub_dir = tempfile.mkdtemp(prefix="sandbox-bridge-")
        with open(os.path.join(stub_dir, job["stub_module"] + ".py"), "w") as handle:
            handle.write(job["stub"])
        call_read, call_write = os.pipe()
        answer_read, _host["answers"] = os.pipe()
        env["PYTHONPATH"] = stub_dir + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["SANDBOX_BRIDGE_FDS"] = "%d,%d" % (answer_read, call_write)
        keep += [answer_read, call_write]
        thread(relay_calls, os.fdopen(call_read, "rb"))
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    pumps = [thread(pump, out_read, b"O"), thread(pump, err_read, b"E")]
    keep += [out_write, err_write]
    stdin = subprocess.DEVNULL
    if job.get("stdin") is not None:
        stdin, in_write = os.pipe()
        keep.append(stdin)
        thread(feed_fd, in_write, base64.b64decode(job["stdin"]))
    bridge_fds = tuple(keep[:2]) if _host["answers"] is not None else ()
    ids = {"user": user[0], "group": user[1]} if user else {}
    try:
        child = subprocess.Popen(job["argv"], cwd=root, env=env, pass_fds=bridge_fds, stdin=stdin,
                                 stdout=out_write, stderr=err_write, **ids)
    except FileNotFoundError:
        return None, [], (127, "command not found: %s" % job["argv"][0])
    except OSError as exc:
        return None, [], (126, "cannot run %s: %s" % (job["argv"][0], exc.strerror or exc))
    prefer_to_be_killed(child.pid)
    for fd in keep:
        os.close(fd)
    return child, pumps, None


def forward_answers():
    """Hand every later line from the host to the program; when the host hangs up, exit.

    After the exit report, that is how a run ends: exit with the program's status, for the engine to record.
    Before it, nobody is left to read the results: end the run and everything in it.
    """
    source = sys.stdin.buffer
    while True:
        line = source.readline()
        if not line:
            if _host["status"] is not None:
                os._exit(_host["status"])
            try:
                os.killpg(0, signal.SIGKILL)  # ignored by PID 1 in a container, which then exits below
            except OSError:
                pass
            os._exit(1)
        if _host["answers"] is not None:
            try:
                write_all(_host["answers"], line)
            except OSError:
                pass  # the program closed its end


def main():
    job = read_job()
    thread(forward_answers)
    # Only a container's own cgroup counts just this run; elsewhere the counter is shared with other processes.
    counted = oom_kills if job.get("count_oom") else (lambda: -1)
    baseline = counted()
    user, own = job.get("user"), job.get("supervisor_user")
    child, pumps, failure = None, [], None
    try:
        if user:
            act_as(user)
    except (OSError, ImportError) as exc:
        failure = (126, "cannot run the program as %d:%d: %s" % (user[0], user[1], exc))
    if failure is None:
        child, pumps, failure = start(job)
    if own:
        try:
            become(own)
        except (OSError, ImportError) as exc:
            # Still within the program's reach: nothing this process says could be trusted. Stop everything.
            os.write(2, ("sandbox: cannot become %d:%d: %s\n" % (own[0], own[1], exc)).encode())
            os._exit(125)
    if child is None:
        code, message = failure
        report = {"exit_code": code, "error": message, "oom_kills": 0}
    else:
        status = child.wait()
        deadline = time.monotonic() + GRACE
        for pumping in pumps:
            # A background process the program left behind may hold the pipes open; do not wait on it forever.
            pumping.join(max(0.0, deadline - time.monotonic()))
        kills = counted()
        report = {"exit_code": 128 - status if status < 0 else status, "error": None,
                  "oom_kills": (kills - baseline) if kills >= 0 and baseline >= 0 else -1}
    _host["status"] = report["exit_code"]  # first: the host may hang up as soon as it has the report
    send(b"X", json.dumps(report).encode())
    threading.Event().wait()  # until the host hangs up; forward_answers then exits with the status


if __name__ == "__main__":
    main()
