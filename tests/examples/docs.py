"""The documentation as the tests read it: the README and every page of the guide (``examples/guide/pages``), and
their fenced code blocks, found by content (a marker string a block contains) rather than by position."""

import re

from tests.examples import ROOT

GUIDE = ROOT / "examples" / "guide"
PAGES: dict[str, str] = {"README.md": (ROOT / "README.md").read_text()} | {
    str(path.relative_to(GUIDE / "pages")): path.read_text() for path in sorted((GUIDE / "pages").rglob("*.md"))}


def blocks(language: str) -> list[tuple[str, str]]:
    """Every block fenced as ``language``, with the page it is on."""
    return [(page, code) for page, text in PAGES.items()
            for code in re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)]


PYTHON_BLOCKS = [code for _, code in blocks("python")]
SH_BLOCKS = [code for _, code in blocks("sh")]


def block(found_in: list[str], marker: str) -> str:
    """The one block containing ``marker``: a second one would make the tests ambiguous, so it fails."""
    found = [b for b in found_in if marker in b]
    assert len(found) == 1, f"expected one documented block containing {marker!r}, found {len(found)}"
    return found[0]
