"""The MCP suite runs on asyncio (served by uvicorn) and on trio (served by Hypercorn). Its tests share servers
and clients across a module (module-scoped async fixtures), so the backend is module-scoped too: each module
runs on one backend, then on the other."""

from pathlib import Path

import pytest

from tests.session.http.backends import mark_client_streams


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_client_streams(items, Path(__file__).parent)
