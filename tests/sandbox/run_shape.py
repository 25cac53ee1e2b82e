"""The run a sandbox gives a command, as the command sees it, checked from inside by one program for every sandbox.

``UnsafeLocalSandbox`` and ``DockerSandbox`` promise a command the same run: a fresh working directory (mode
0700) holding just its files, HOME set to it, an environment of PATH, HOME, LANG=C.UTF-8, TMPDIR,
PYTHONDONTWRITEBYTECODE and the sandbox's configured names only, an empty standard input, and stdout kept
apart from stderr. ``SHAPE`` checks exactly that: run as ``python shape.py NAME...`` over ``FILES``, with
the configured environment names as its arguments, it prints what it saw as one JSON line on stdout, each
way the run differs from the promise on stderr, and exits 1 if there was any.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sandbox import Sandbox

SHAPE = r'''
import json, os, stat, sys

configured = set(sys.argv[1:])
promised = {"PATH", "HOME", "LANG", "TMPDIR", "PYTHONDONTWRITEBYTECODE"} | configured
cwd = os.getcwd()
tmp = os.environ.get("TMPDIR", "")
# Python adds LC_CTYPE itself where the C.UTF-8 locale is missing; the sandbox did not pass it.
names = sorted(set(os.environ) - {"LC_CTYPE"})
seen = {"cwd": cwd, "home": os.environ.get("HOME"), "listing": sorted(os.listdir(".")),
        "mode": oct(stat.S_IMODE(os.stat(".").st_mode)), "env": names, "lang": os.environ.get("LANG"),
        "tmpdir": tmp, "stdin": sys.stdin.read()}
problems = []
if seen["home"] != cwd:
    problems.append("HOME %r is not the working directory %r" % (seen["home"], cwd))
if seen["listing"] != ["data", "shape.py"]:
    problems.append("the working directory holds %r, not just the files" % seen["listing"])
if seen["mode"] != "0o700":
    problems.append("the working directory has mode %s, not 0o700" % seen["mode"])
if set(names) != promised:
    problems.append("the environment has %r, not %r" % (names, sorted(promised)))
if seen["lang"] != "C.UTF-8":
    problems.append("LANG is %r" % seen["lang"])
if not (os.path.isabs(tmp) and os.path.isdir(tmp) and not tmp.startswith(cwd + os.sep)):
    problems.append("TMPDIR %r is not a directory of its own" % tmp)
if seen["stdin"]:
    problems.append("standard input was not empty")
print(json.dumps(seen))
for problem in problems:
    print("shape: " + problem, file=sys.stderr)
sys.exit(1 if problems else 0)
'''

FILES = {"shape.py": SHAPE, "data/input.txt": "x"}


async def check_run_shape(sandbox: Sandbox, python: str, configured: Iterable[str]) -> dict[str, Any]:
    """Run ``SHAPE`` in ``sandbox`` (made with the environment names ``configured``) and check the promised run;
    what the command saw. ``python`` names the interpreter there."""
    configured = list(configured)
    result = await sandbox.exec([python, "shape.py", *configured], files=FILES)
    assert result.ok and not result.stderr, f"the run was not the promised one: {result}"
    found: dict[str, Any] = json.loads(result.stdout)  # stdout holds the JSON line alone
    # A name the sandbox was not given is missing from the run: said on stderr, and stdout stays apart.
    missing = await sandbox.exec([python, "shape.py", *configured, "NOT_GIVEN"], files=FILES)
    assert missing.exit_code == 1 and missing.stderr.startswith("shape: the environment has"), missing
    assert json.loads(missing.stdout)["env"] == found["env"], missing
    return found
