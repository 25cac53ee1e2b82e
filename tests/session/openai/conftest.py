"""The HTTP-facing openai suite runs on asyncio, the loop its server runs on."""

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
