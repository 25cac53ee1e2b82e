"""The package as a user gets it: built into an sdist and a wheel (the wheel from the sdist, as ``python -m build``
does), checked by twine, installed from the wheel into a fresh venv, and run from a folder outside the source tree.

The build is isolated, as pip's is: it installs the ``build-system`` requirements from PyPI, so they are checked
too, and it costs about 4 s more than ``--no-isolation``. pip reaches PyPI for the build requirements and the
dependencies; nothing else touches the network (the programs run on the offline demo model, with no model keys in
their environment). About 30 s with a warm pip cache, so it is ``slow``: CI runs it on every supported Python.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("loop", "provider", "cognitive", "session", "sandbox", "verifier")
# Files the code reads from its own folder at run time (sandbox/_run.py, sandbox/_stubs.py), beside py.typed.
READ_AT_RUN_TIME = ("sandbox/_supervisor.py", "sandbox/_toolstub.py")

# A cold pip cache downloads every dependency; the test itself takes well under the suite's 120 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@attrs.frozen
class Built:
    """The two distributions ``python -m build`` made."""

    wheel: Path
    sdist: Path


@attrs.frozen
class Installed:
    """A fresh venv with the wheel installed, and an empty folder to run its programs from."""

    python: Path
    site_packages: Path
    workdir: Path

    def run(self, *args: str) -> str:
        """Run the venv's Python from ``workdir`` as a user would: no PYTHONPATH, no model keys. Its stdout."""
        env = {"PATH": f"{self.python.parent}{os.pathsep}/usr/bin{os.pathsep}/bin", "PYTHONNOUSERSITE": "1"}
        return run([str(self.python), *args], cwd=self.workdir, env=env, timeout=60)


def run(argv: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float) -> str:
    """Run ``argv``; fail the test with its output unless it exits 0. Its stdout."""
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def pip_env() -> dict[str, str]:
    """This process's environment (proxies, certificates, pip's settings) without what would point Python at the
    source tree or another environment."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


@pytest.fixture(scope="module")
def built() -> Iterator[Built]:
    with tempfile.TemporaryDirectory(prefix="cognitive-loop-dist-") as temp:
        run([sys.executable, "-m", "build", "--outdir", temp, str(ROOT)], cwd=ROOT, env=pip_env(), timeout=180)
        wheels, sdists = sorted(Path(temp).glob("*.whl")), sorted(Path(temp).glob("*.tar.gz"))
        assert len(wheels) == 1 and len(sdists) == 1, sorted(os.listdir(temp))
        yield Built(wheel=wheels[0], sdist=sdists[0])


@pytest.fixture(scope="module")
def installed(built: Built) -> Iterator[Installed]:
    with tempfile.TemporaryDirectory(prefix="cognitive-loop-venv-") as temp:
        venv, workdir = Path(temp) / "venv", Path(temp) / "work"
        workdir.mkdir()
        # A venv from the Python running the tests, with its own pip (ensurepip): fails if either is missing.
        run([sys.executable, "-m", "venv", str(venv)], cwd=workdir, env=pip_env(), timeout=120)
        python = venv / "bin" / "python"
        run([str(python), "-m", "pip", "install", "-q", str(built.wheel)], cwd=workdir, env=pip_env(), timeout=240)
        site_packages = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                 cwd=workdir, env={}, timeout=30).strip())
        yield Installed(python=python, site_packages=site_packages, workdir=workdir)


def source_files() -> set[str]:
    """Every file under the six packages' folders but bytecode and hidden files: what the wheel must hold."""
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*"):
            relative = path.relative_to(ROOT)
            hidden = any(part.startswith(".") or part == "__pycache__" for part in relative.parts)
            if path.is_file() and not hidden and path.suffix != ".pyc":
                found.add(relative.as_posix())
    return found


def test_the_wheel_holds_every_module_and_data_file_of_the_six_packages_and_nothing_else(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as wheel:
        names = wheel.namelist()
    shipped = {n for n in names if not n.split("/")[0].endswith(".dist-info") and not n.endswith("/")}
    expected = source_files()
    assert not expected - shipped, f"in the source tree but not in the wheel: {sorted(expected - shipped)}"
    assert not shipped - expected, f"in the wheel but not in the six packages: {sorted(shipped - expected)}"
    assert {f"{p}/py.typed" for p in PACKAGES} | set(READ_AT_RUN_TIME) <= shipped


def test_the_sdist_holds_what_the_wheel_is_built_from(built: Built) -> None:
    with tarfile.open(built.sdist) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}  # under cognitive_loop-<version>/
    assert {"pyproject.toml", "README.md", "PKG-INFO"} <= names
    assert source_files() <= names, f"not in the sdist: {sorted(source_files() - names)}"


def test_twine_check_passes_strictly_on_both(built: Built) -> None:
    run([sys.executable, "-m", "twine", "check", "--strict", str(built.wheel), str(built.sdist)], cwd=ROOT,
        env=pip_env(), timeout=60)


WHERE = """
import importlib, sys
for name in sys.argv[1:]:
    print(importlib.import_module(name).__file__)
"""


def test_the_six_packages_import_from_the_venv_not_the_source_tree(installed: Installed) -> None:
    installed.run("-c", "import loop, provider, cognitive, session, sandbox, verifier")
    files = [Path(line) for line in installed.run("-c", WHERE, *PACKAGES).splitlines()]
    assert len(files) == len(PACKAGES)
    assert all(f.is_relative_to(installed.site_packages) for f in files), files


def test_the_quickstart_runs_offline_on_the_installed_package(installed: Installed) -> None:
    out = installed.run(str(ROOT / "examples" / "quickstart.py"))
    assert "Running on the offline demo model" in out
    assert "[verifier report]" in out
    assert "final answer: The train covers 200 km in 2 h, so its average speed is 100 km/h." in out


def test_the_command_line_starts(installed: Installed) -> None:
    out = installed.run("-m", "session", "--help")
    assert out.startswith("usage: python -m session") and "chat" in out and "serve" in out
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert installed.run("-m", "session", "--version").strip() == f"python -m session (cognitive-loop {version})"


CHECK_DATA = """
import importlib.metadata, importlib.resources, importlib.util, sys
packages, data = sys.argv[1].split(), sys.argv[2].split()
wanted = [(p, "py.typed") for p in packages] + [tuple(d.split("/")) for d in data]
missing = [f"{p}/{name}" for p, name in wanted if not importlib.resources.files(p).joinpath(name).is_file()]
for point in importlib.metadata.distribution("cognitive-loop").entry_points:
    if importlib.util.find_spec(point.module) is None:
        missing.append(f"{point.group} entry point {point.name} = {point.value}")
print(*missing, sep="\\n")
"""

# The supervisor, read from sandbox/_supervisor.py at import, runs a command as a local subprocess.
RUN_IN_SANDBOX = """
import anyio
from sandbox import UnsafeLocalSandbox

async def main():
    done = await UnsafeLocalSandbox().exec(["python", "-c", "print(6 * 7)"])
    print(done.exit_code, done.stdout.strip(), done.error)

anyio.run(main)
"""


def test_the_files_read_at_run_time_are_installed(installed: Installed) -> None:
    missing = installed.run("-c", CHECK_DATA, " ".join(PACKAGES), " ".join(READ_AT_RUN_TIME)).strip()
    assert not missing, f"missing from the installed package:\n{missing}"
    assert installed.run("-c", RUN_IN_SANDBOX).split()[:2] == ["0", "42"]


# Examples that serve until stopped: each is checked to start (its line saying so), then stopped.
SERVES = {"chat_backend.py": '{"serving": "http://'}
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_runs_on_the_installed_package_or_says_in_one_line_what_is_missing(
        installed: Installed, example: str) -> None:
    """With nothing installed but the wheel (no test extras), an example runs, or exits non-zero with one line
    saying what to install; never a traceback."""
    env = {"PATH": f"{installed.python.parent}{os.pathsep}/usr/bin{os.pathsep}/bin", "PYTHONNOUSERSITE": "1",
           "SESSION_TOKEN": "example-token"}
    argv = [str(installed.python), str(ROOT / "examples" / example)]
    if example in SERVES:
        argv += ["--port", "0", "--database", str(installed.workdir / "chat_backend.db")]
        child = subprocess.Popen(argv, cwd=installed.workdir, env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            assert child.stdout is not None
            seen = b""
            deadline = time.monotonic() + 60
            while SERVES[example].encode() not in seen and b"Traceback" not in seen:
                ready, _, _ = select.select([child.stdout], [], [], max(0.0, deadline - time.monotonic()))
                chunk = os.read(child.stdout.fileno(), 4096) if ready else b""
                if not chunk:  # the deadline passed, or the example exited
                    break
                seen += chunk
            said = seen.decode(errors="replace")
            assert SERVES[example] in said and "Traceback" not in said, said
        finally:
            child.terminate()
            child.wait(timeout=30)
            if child.stdout is not None:
                child.stdout.close()
        return
    done = subprocess.run(argv, cwd=installed.workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=120, check=False)
    assert "Traceback" not in done.stderr, f"{example} failed:\n{done.stderr[-3000:]}"
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        assert len(said) == 1 and "pip install" in said[0], f"{example} exited {done.returncode}:\n{done.stderr}"
