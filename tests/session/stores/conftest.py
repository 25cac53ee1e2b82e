"""The store suite runs on asyncio: its group-commit and native-cancellation tests are written against
asyncio's scheduling and task.cancel()."""

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
