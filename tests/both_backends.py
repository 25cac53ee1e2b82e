"""The ``anyio_backend`` fixture of the suites that run on asyncio and on trio: each test runs once on each."""

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend
