"""The store suite runs on asyncio and on trio. The group-commit and native-cancellation tests that are written
against asyncio's scheduling (tasks start in the order they were spawned) and ``task.cancel()`` run on asyncio
only: they carry ``ASYNCIO_ONLY``."""

import pytest

from tests.both_backends import anyio_backend  # noqa: F401

ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", ["asyncio"])
