"""Shared test setup. Async tests run on anyio (``anyio_mode = auto``) with the asyncio backend, and those of
the packages that run patterns (``loop``, ``cognitive``, ``session``) on trio too (``tests.both_backends``). Tests marked
``docker`` need a Docker engine and the sandbox image: they fail in CI (``CI=true``) when it is missing, and
skip elsewhere (see ``tests.sandbox.docker_env``)."""

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loop import tracing


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # In a hook, not a fixture: a skip raised by a fixture is reported at each test, one summary line per
    # test; raised here it is reported where it was raised, so every Docker test skips under one line.
    if item.get_closest_marker("docker") is not None:
        from tests.sandbox.docker_env import require_docker

        require_docker()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Every span the framework records during the test, in memory (the global provider is never touched)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider)
    try:
        yield exporter
    finally:
        tracing.configure(None)
        provider.shutdown()
