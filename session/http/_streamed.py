"""``Streamed``: a streaming response that closes its body's async generator when the response ends."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from starlette.responses import StreamingResponse


class Streamed(StreamingResponse):
    """Starlette's ``StreamingResponse``, but the ``body`` generator is closed as the response ends, however it
    ends. Starlette stops iterating a body whose client hung up and leaves the generator to the garbage
    collector: its ``finally`` clauses run at some later time, and on trio dropping it warns (``ResourceWarning``).
    """

    def __init__(self, body: AsyncGenerator[str | bytes, None], *, media_type: str,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(body, media_type=media_type, headers=headers)
        self._body = body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async with contextlib.aclosing(self._body):
            await super().__call__(scope, receive, send)
