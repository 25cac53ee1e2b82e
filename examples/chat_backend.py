"""A chat backend: a verified ReAct agent served over HTTP, with durable sessions in SQLite.

    python examples/chat_backend.py --port 8000 --token change-me

Clients open sessions, post messages and follow a resumable SSE event stream (see the HTTP API page of the guide, examples/guide/pages/http.md), or talk to
the agent with any OpenAI client at http://127.0.0.1:8000/v1. Without OPENAI_API_KEY / OPENAI_BASE_URL the
model is a small offline stand-in that looks up the weather with the tool and answers from the result.
"""

from __future__ import annotations

import argparse
import json
import os

import anyio

import provider
from cognitive import ReAct, WithVerification, new_turn_processor
from loop import Request, Role, TurnExecutor, tool, tracing
from session import HTTPConduit, Manager, SQLiteStore, step_factory
from verifier import FunctionVerifier

FORECASTS = {"paris": "light rain, 14 °C", "oslo": "snow, -3 °C", "lima": "sunny, 24 °C"}


@tool
async def weather(city: str) -> str:
    """Today's weather in a city.

    Args:
        city: the city's name, e.g. Paris.
    """
    forecast = FORECASTS.get(city.strip().lower())
    if forecast is None:
        raise LookupError(f"no forecast for {city!r}; try one of {sorted(FORECASTS)}")
    return forecast


def offline_model(request: Request) -> object:
    """Calls the weather tool for the city the user names, then answers with what the tool said."""
    last = request.turns[-1]
    if last.role is Role.TOOL:
        result = last.tool_results[0]
        return f"Sorry, {result.content.removeprefix('error: ')}" if result.is_error else f"Today: {result.content}."
    words = [w.strip("?.!,") for w in last.text.split()]
    city = next((w for w in words if w.lower() in FORECASTS), words[-1] if words else "")
    return provider.tool_call("weather", {"city": city})


def cites_the_tool(state) -> bool:  # type: ignore[no-untyped-def]
    """An answer about the weather must repeat what the tool returned (no invented forecasts)."""
    results = [r.content for t in state for r in t.tool_results if not r.is_error]
    return not results or any(r in (state.answer or "") for r in results)


TOOLS = [weather]  # what `python -m session serve examples.chat_backend:make_agent` gives the step


def demo_provider() -> provider.Function:
    return provider.Function(offline_model)


def make_agent(step: TurnExecutor) -> WithVerification:
    return WithVerification(ReAct(step, max_turns=4), step, verifiers=[FunctionVerifier(cites_the_tool)])


def model() -> provider.Provider:
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        where = {"base_url": os.environ["OPENAI_BASE_URL"]} if os.environ.get("OPENAI_BASE_URL") else {}
        return provider.Retry(provider.OpenAICompatible(os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), **where))
    return demo_provider()


async def main(host: str, port: int, token: str | None, database: str) -> None:
    store = SQLiteStore(database)
    manager = Manager(new_turn_processor(make_agent), provider=model(), store=store,
                      make_step=step_factory(TOOLS))
    conduit = HTTPConduit(host=host, port=port, token=token, allow_no_token=token is None)
    try:
        async with manager, anyio.create_task_group() as group:
            url = await group.start(conduit.serve, manager)
            print(json.dumps({"serving": url}), flush=True)
    finally:
        await store.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--token", default=os.environ.get("SESSION_TOKEN"))
    parser.add_argument("--database", default="chat_backend.db")
    args = parser.parse_args()
    tracing.configure_logging(level="info")  # request logs on stderr
    try:
        anyio.run(main, args.host, args.port, args.token, args.database)
    except KeyboardInterrupt:
        pass
