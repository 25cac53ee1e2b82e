from collections.abc import Iterator

import pytest

from tests.provider.wire.server import WireServer


@pytest.fixture(scope="session")
def _wire_server() -> Iterator[WireServer]:
    server = WireServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def wire(_wire_server: WireServer) -> Iterator[WireServer]:
    """The loopback server, emptied for this test."""
    _wire_server.reset()
    yield _wire_server
    _wire_server.reset()
