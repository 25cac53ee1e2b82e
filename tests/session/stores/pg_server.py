"""A PostgreSQL server for the tests: required in CI (a missing one FAILS there), optional elsewhere (the test
skips, saying how to get one).

The server's URL comes from ``COGNITIVE_LOOP_TEST_POSTGRES`` (``postgresql://cl@127.0.0.1:54329/cl``): ``bash
.ci/postgres-setup.sh`` starts a throwaway one on 127.0.0.1 and prints it, and .ci/run does that before the tests.
Each test gets a schema of its own (``pg_url``), dropped when it ends, so tests never see each other's tables.
"""

from __future__ import annotations

import functools
import importlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

ENV = "COGNITIVE_LOOP_TEST_POSTGRES"
HOW = (f"set {ENV} to a server's URL (postgresql://cl@127.0.0.1:54329/cl): `export {ENV}=$(bash "
       ".ci/postgres-setup.sh)` starts a throwaway server on 127.0.0.1 and prints its URL, as .ci/run does")


def in_ci() -> bool:
    """Whether this is a CI run (``CI=true``), where the PostgreSQL tests must run rather than skip."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_psycopg(what: str) -> None:
    """Skip the calling test module when psycopg is not installed, saying ``what`` needs it; in CI, where it must
    be installed, do nothing, so that the module's own import of it fails loudly."""
    if not in_ci():
        pytest.importorskip("psycopg", reason=f"{what} needs psycopg 3 (pip install -e '.[postgres]')")


def unavailable(why: str) -> None:
    """Fail the test in CI, skip it elsewhere, saying ``why``."""
    if in_ci():
        pytest.fail(f"the PostgreSQL tests must run in CI, but {why}; {HOW}", pytrace=False)
    pytest.skip(f"needs a PostgreSQL server: {why}; {HOW}")


@functools.cache
def _problem(url: str) -> str | None:
    """Why the server at ``url`` cannot be used, or ``None`` when it can. Asked once per test session."""
    try:
        import psycopg
        importlib.import_module("psycopg_pool")
    except ImportError as exc:
        return f"psycopg 3 and psycopg_pool are not installed ({exc}; pip install -e '.[postgres]')"
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"the server at {url} cannot be used: {' '.join(str(exc).split())}"
    return None


def server_url() -> str:
    """The test server's URL, or the test skips (or fails, in CI)."""
    url = os.environ.get(ENV, "").strip()
    if not url:
        unavailable(f"{ENV} is not set")
    problem = _problem(url)
    if problem is not None:
        unavailable(problem)
    return url


def admin() -> Any:
    """A plain connection (autocommit) to the test server, as its superuser: for setting tables up by hand and
    for looking at what a store wrote."""
    import psycopg

    return psycopg.connect(server_url(), autocommit=True)


def in_schema(url: str, schema: str, **fields: str) -> str:
    """``url`` with the connection's tables in ``schema`` (and libpq's ``fields`` added to its query)."""
    query = "&".join([f"options=-csearch_path%3D{schema}", *(f"{k}={v}" for k, v in fields.items())])
    return f"{url}{'&' if '?' in url else '?'}{query}"


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh, empty schema on the test server, dropped (with all in it) when the test ends."""
    schema = f"test_{uuid.uuid4().hex[:12]}"
    with admin() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        with admin() as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def pg_url(pg_schema: str) -> str:
    """The test server's URL, its tables in a schema of this test's own."""
    return in_schema(server_url(), pg_schema)
