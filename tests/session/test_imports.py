"""What importing ``session`` loads: nothing until a name is used, and for ``MCPTools`` not the HTTP server."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import session

ROOT = Path(__file__).resolve().parents[2]
SERVER_SIDE = ("session.http", "session.openai", "session._serving", "session._bearer", "session.mcp._conduit")


def loaded_after(code: str) -> list[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    program = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=True)
    return json.loads(done.stdout)


def top_level(modules: list[str], *names: str) -> list[str]:
    return [m for m in modules if m.split(".")[0] in names]


def test_importing_session_loads_none_of_its_parts() -> None:
    loaded = loaded_after("import session")
    assert [m for m in loaded if m.startswith("session.")] == ["session._lazy"]
    assert top_level(loaded, "loop", "starlette", "uvicorn", "mcp", "sqlite3", "httpx") == []


def test_importing_mcp_tools_does_not_load_the_http_server() -> None:
    loaded = loaded_after("from session import MCPTools")
    assert [m for m in loaded if m.startswith(SERVER_SIDE)] == []
    # The mcp SDK's own __init__ imports its server side (starlette and uvicorn included) whatever we do, so
    # the measure is what loading MCPTools adds to what ``import mcp`` alone loads: none of that stack.
    sdk = set(loaded_after("import mcp"))
    assert [m for m in top_level(loaded, "starlette", "uvicorn") if m not in sdk] == []


def test_importing_a_core_name_loads_no_conduit() -> None:
    loaded = loaded_after("from session import Manager, Session, MemoryStore")
    assert [m for m in loaded if m.startswith((*SERVER_SIDE, "session.mcp", "session._stdio"))] == []
    assert top_level(loaded, "starlette", "uvicorn", "mcp") == []


def test_star_import_and_dir_give_every_name() -> None:
    namespace: dict[str, object] = {}
    exec("from session import *", namespace)
    assert set(session.__all__) <= set(namespace)
    assert set(session.__all__) <= set(dir(session))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'session' has no attribute 'Nope'"):
        getattr(session, "Nope")


def test_a_subpackage_is_still_importable_by_name() -> None:
    from session import stores

    assert stores.SQLiteStore is session.SQLiteStore


def typed_and_lazy(package: str) -> tuple[dict[str, str], dict[str, str]]:
    """What the package imports under ``TYPE_CHECKING`` and what it loads lazily, each as {name: module}."""
    tree = ast.parse(Path(importlib.import_module(package).__file__ or "").read_text())
    typed: dict[str, str] = {}
    lazy: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imported in node.body:
                assert isinstance(imported, ast.ImportFrom) and imported.module
                typed.update((alias.name, imported.module) for alias in imported.names)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.value.args:
            where = ast.literal_eval(node.value.args[1])
            lazy.update((name, module) for module, names in where.items() for name in names)
    return typed, lazy


@pytest.mark.parametrize("package", ["session", "session.mcp"])
def test_type_checkers_see_what_loads_lazily(package: str) -> None:
    typed, lazy = typed_and_lazy(package)
    assert lazy and typed == lazy
    if package == "session":
        assert sorted(lazy) == sorted(session.__all__)
