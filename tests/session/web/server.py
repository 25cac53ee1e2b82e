"""The chat page's server for browser tests: a real ``HTTPConduit`` on 127.0.0.1 (a free port) over the test
agent, run on asyncio or trio in a thread of its own while the browser is driven from the test's thread."""

from __future__ import annotations

import threading

import anyio

from session import Manager, step_factory
from session.http import HTTPConduit
from session.stores import MemoryStore
from tests.session.web import agent

TOKEN = "page-token"


class PageServer:
    """Serves the test agent until ``stop``; ``url`` once started. ``token=None`` serves without one (this
    machine only)."""

    def __init__(self, backend: str, token: str | None = TOKEN) -> None:
        self.backend = backend
        self.token = token
        self.url = ""
        self.store = MemoryStore()
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"page-server-{backend}", daemon=True)

    def start(self) -> PageServer:
        self._thread.start()
        if not self._ready.wait(15) or self._failure is not None:
            self.stop()
            raise RuntimeError(f"the page server did not start on {self.backend}") from self._failure
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(15)

    def _run(self) -> None:
        try:
            anyio.run(self._serve, backend=self.backend)
        except BaseException as exc:  # reported by start
            self._failure = exc
            self._ready.set()

    async def _serve(self) -> None:
        conduit = HTTPConduit(host="127.0.0.1", port=0, token=self.token, allow_no_token=self.token is None,
                              keepalive=1.0, shutdown_timeout=1.0)
        manager = Manager(agent.processor, provider=agent.provider(), store=self.store,
                          make_step=step_factory(agent.TOOLS))
        async with manager, anyio.create_task_group() as group:
            self.url = await group.start(conduit.serve, manager)
            self._ready.set()
            while not self._stopping.is_set():
                await anyio.sleep(0.05)
            group.cancel_scope.cancel()
