"""The HTTP conduits are served by uvicorn, which runs on asyncio: on trio they refuse plainly, saying so."""

import pytest

from cognitive import SingleShot, new_turn_processor
from loop import UsageError
from provider import Function
from session import HTTPConduit, MCPConduit, Manager, MemoryStore


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.mark.parametrize("conduit", [HTTPConduit(host="127.0.0.1", port=0, token="t"),
                                     MCPConduit(transport="http", host="127.0.0.1", port=0, token="t")],
                         ids=["http", "mcp"])
async def test_an_http_conduit_on_trio_refuses_and_names_the_fix(conduit: object) -> None:
    manager = Manager(new_turn_processor(SingleShot), provider=Function(lambda r: "hi"), store=MemoryStore())
    async with manager:
        with pytest.raises(UsageError, match="backend='asyncio'"):
            await conduit.serve(manager)  # type: ignore[attr-defined]
