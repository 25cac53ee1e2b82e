"""Shared test setup. Async tests run on anyio (``anyio_mode = auto``) with the asyncio backend."""

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
