"""The AG-UI suite runs on asyncio (served by uvicorn) and on trio (served by Hypercorn)."""

from pathlib import Path

import pytest

from tests.both_backends import anyio_backend as anyio_backend
from tests.session.http.backends import mark_client_streams

__all__ = ["anyio_backend", "pytest_collection_modifyitems"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_client_streams(items, Path(__file__).parent)
