"""The A2A suite: the served side runs on asyncio only (a2a-sdk's request handler runs its tasks in asyncio tasks),
so tests driving the app in process run on asyncio; the client side (a2a-sdk's client, the A2A tool) runs on
asyncio and on trio, against an agent served by uvicorn in a thread of its own."""

from pathlib import Path

import pytest

from tests.both_backends import anyio_backend as anyio_backend
from tests.session.http.backends import mark_client_streams

__all__ = ["anyio_backend", "pytest_collection_modifyitems"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_client_streams(items, Path(__file__).parent)
