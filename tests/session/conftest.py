"""The session suite runs on asyncio and on trio."""

from tests.both_backends import anyio_backend as anyio_backend
