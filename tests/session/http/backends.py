"""What the HTTP-facing suites (http, openai, mcp) share to run on asyncio and on trio.

On trio, an async generator dropped before it is exhausted warns (``ResourceWarning``) when it is collected.
httpx's and httpcore's response streams are chains of async generators that closing the outer one does not close,
so a test client that stops reading an endless event stream leaves some behind however it closes them (httpx
issue 3686); the ``openai`` client's stream decoder is built the same way over them. Those warnings, from the
client libraries and only those, are not the tests' concern; the servers' own generators still warn.
"""

from pathlib import Path

import pytest

CLIENT_STREAMS = pytest.mark.filterwarnings(r"ignore:Async generator '(httpx2?|httpcore2?|openai)\._:ResourceWarning")


def mark_client_streams(items: list[pytest.Item], folder: Path) -> None:
    """Let the tests under ``folder`` drop httpx's response streams unfinished."""
    for item in items:
        if item.path.is_relative_to(folder):
            item.add_marker(CLIENT_STREAMS)
