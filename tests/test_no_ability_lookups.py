"""No product code looks an executor's or a provider's ability up by name: abilities are declared protocols
(``loop.Executor`` and its parts, ``loop.Described``), checked with ``loop.has`` or ``loop.require``."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("loop", "provider", "verifier", "sandbox", "cognitive", "session")
ABILITIES = ("turn", "submit", "sample", "derive", "pipeline", "events", "transforms", "options", "view", "run",
             "stream", "model", "tools", "provider", "supports_choices", "info")
LOOKUP = re.compile(r"""(?:getattr|hasattr)\([^,()]+,\s*["'](%s)["']""" % "|".join(ABILITIES))


def test_no_product_code_looks_an_ability_up_by_name() -> None:
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1) if LOOKUP.search(line)]
    assert not found, "abilities looked up by name:\n" + "\n".join(found)


def test_the_check_finds_a_lookup() -> None:
    assert LOOKUP.search('derive = getattr(step, "derive", None)')
    assert LOOKUP.search("if hasattr(step, 'transforms'):")
    assert not LOOKUP.search('name = getattr(fn, "__name__", None)')
