"""``provider.testing`` (``check_provider``, ``EventRecorder``) imports without pytest, as an application that
checks its own provider outside tests has it; only the fixtures, which pytest loads, need it."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# pytest made unimportable, as in an environment that never installed it
NO_PYTEST = "import sys; sys.modules['pytest'] = None; "


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", NO_PYTEST + code], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_provider_testing_imports_without_pytest() -> None:
    done = run("from provider.testing import EventRecorder, check_provider; print('ok')")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_fixture_asked_for_by_name_without_pytest_says_what_is_missing() -> None:
    done = run("import provider.testing as t; t.scripted")
    assert done.returncode != 0 and "pytest" in done.stderr


def test_the_extending_example_runs_without_pytest() -> None:
    done = run("import runpy; runpy.run_path('examples/extending.py', run_name='__main__')")
    assert done.returncode == 0, done.stderr[-2000:]
