"""Using remote A2A agents as tools does not load the serving side (the endpoint, its executor, the bearer check,
the SDK's server)."""

from __future__ import annotations

from tests.session.test_imports import loaded_after


def test_importing_the_a2a_tool_does_not_load_the_server_side() -> None:
    loaded = loaded_after("from session.a2a import a2a_tool, A2ATool, A2AToolError")
    assert [m for m in loaded if m.startswith("session.")] == ["session._lazy", "session.a2a", "session.a2a._tool"]
    assert [m for m in loaded if m.startswith(("a2a.server", "sse_starlette", "uvicorn"))] == []


def test_the_serving_side_loads_on_first_use() -> None:
    loaded = loaded_after("import session.a2a as a2a\nassert a2a.A2AEndpoint and a2a.CARD_PATHS")
    assert "session.a2a._endpoint" in loaded and "a2a.server.request_handlers" in loaded
