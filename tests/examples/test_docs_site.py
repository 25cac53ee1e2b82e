"""The documentation site builds strictly (a broken link, a missing anchor, a page left out of the navigation or
an API reference that cannot be resolved fails the build), and the README stays a short landing page."""

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.examples import ROOT
from tests.examples.docs import GUIDE, PAGES


def test_the_site_builds_strictly_with_its_api_reference(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(GUIDE / "mkdocs.yml"),
                           "--site-dir", str(tmp_path / "site")], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    reference = (tmp_path / "site" / "reference" / "loop" / "index.html").read_text()
    for name in ("Step", "State", "Budget", "fan_out"):  # documented from the docstrings, not just named
        assert re.search(rf'id="loop\.{name}"', reference), f"loop.{name} is missing from the API reference"
    assert (tmp_path / "site" / "cancellation" / "index.html").exists()


def test_every_page_is_in_the_navigation() -> None:
    nav = (GUIDE / "mkdocs.yml").read_text()
    for page in PAGES:
        if page != "README.md":
            assert re.search(rf":\s+{re.escape(page)}$", nav, flags=re.M), f"{page} is not in mkdocs.yml's nav"


def test_the_readme_is_a_short_landing_page_linking_into_the_guide() -> None:
    readme = PAGES["README.md"]
    assert len(readme.splitlines()) < 250
    assert "## Contents" in readme
    assert "pip install -e . && python examples/quickstart.py" in readme
    assert "pip install -e '.[test]' && python -m pytest" in readme
    for link in re.findall(r"\]\((examples/guide/pages/[^)#]+)", readme):
        assert (ROOT / link).is_file(), f"the README links to {link}, which does not exist"
