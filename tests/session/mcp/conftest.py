"""The MCP tests share servers and clients across a module (module-scoped async fixtures), so their anyio
backend is module-scoped too."""

import pytest


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"
