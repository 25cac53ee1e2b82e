"""A composed agent used as another program's model, over the OpenAI-compatible API.

    python examples/drop_in_model.py

The agent (ReAct with its own `weather` tool) is served on 127.0.0.1; a client then talks to it as it would to
any OpenAI model, with plain HTTP so every field shows: it asks for a typed answer (`response_format`), and
hands the model a tool of its own (`notify`), which the client runs itself when the model calls it. Any
framework that speaks the Chat Completions API (pydantic-ai, LangChain, the openai SDK) does the same. Without
OPENAI_API_KEY / ANTHROPIC_API_KEY the agent's model is a small offline stand-in.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx

import provider
from cognitive import ReAct, new_turn_processor
from loop import Request, Role, TurnExecutor, tool, tracing
from session import HTTPConduit, Manager, MemoryStore, step_factory

FORECASTS = {"paris": "light rain, 14 °C", "oslo": "snow, -3 °C"}


@tool
def weather(city: str) -> str:
    """Today's weather in a city.

    Args:
        city: the city's name, e.g. Oslo.
    """
    return FORECASTS.get(city.strip().lower(), "unknown")


def offline_model(request: Request) -> object:
    """Looks the weather up with the agent's tool; then calls the client's `notify` if it was offered; answers in
    the JSON the client's schema asks for when one is asked for."""
    last = request.turns[-1]
    forecast = next((r.content for t in request.turns for r in t.tool_results if r.name == "weather"), None)
    if forecast is None:
        return provider.tool_call("weather", {"city": "Oslo"})
    offered = {spec.name for spec in request.tools}
    if "notify" in offered and not any(r.name == "notify" for t in request.turns for r in t.tool_results):
        return provider.tool_call("notify", {"text": f"Oslo: {forecast}"})
    if request.options.output_schema is not None:
        return json.dumps({"city": "Oslo", "forecast": forecast})
    if last.role is Role.TOOL and last.tool_results[0].name == "notify":
        return f"I looked it up ({forecast}) and sent the notification."
    return f"In Oslo today: {forecast}."


TOOLS = [weather]  # what `python -m session serve examples.drop_in_model:make_agent` gives the step


def demo_provider() -> provider.Function:
    return provider.Function(offline_model)


def make_agent(step: TurnExecutor) -> ReAct:
    return ReAct(step, max_turns=6)


NOTIFY = {"type": "function", "function": {
    "name": "notify", "description": "Send the user a short notification.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}
FORECAST = {"type": "object", "properties": {"city": {"type": "string"}, "forecast": {"type": "string"}},
            "required": ["city", "forecast"], "additionalProperties": False}


async def client(url: str) -> list[str]:
    """What a framework does with the served agent as its model; the lines it prints."""
    lines = []
    ask = [{"role": "user", "content": "What is the weather in Oslo?"}]
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        # A typed answer: the content is JSON that validates against the schema.
        reply = (await http.post("/v1/chat/completions", json={
            "model": "agent", "messages": ask,
            "response_format": {"type": "json_schema", "json_schema": {"name": "Forecast", "schema": FORECAST}},
        })).json()
        lines.append(f"typed answer: {reply['choices'][0]['message']['content']}")

        # A client tool: the agent's own tool runs on the server; the client's comes back as a tool call. The
        # X-Session-Id keeps the conversation on the server, with the agent's own calls the client never sees.
        kept = {"X-Session-Id": "weather-demo"}
        reply = (await http.post("/v1/chat/completions", headers=kept, json={"model": "agent", "messages": ask,
                                                                             "tools": [NOTIFY]})).json()
        choice = reply["choices"][0]
        call: dict[str, Any] = choice["message"]["tool_calls"][0]
        lines.append(f"finish_reason={choice['finish_reason']}: the model calls the client's "
                     f"{call['function']['name']}({call['function']['arguments']})")
        sent = f"notified: {json.loads(call['function']['arguments'])['text']}"  # the client runs its tool
        history = [*ask, {"role": "assistant", "content": choice["message"]["content"],
                          "tool_calls": choice["message"]["tool_calls"]},
                   {"role": "tool", "tool_call_id": call["id"], "content": sent}]
        reply = (await http.post("/v1/chat/completions", headers=kept, json={"model": "agent", "messages": history,
                                                                             "tools": [NOTIFY]})).json()
        lines.append(f"answer: {reply['choices'][0]['message']['content']}")
    return lines


async def main() -> None:
    manager = Manager(new_turn_processor(make_agent), provider=provider.from_environment(
        demo_provider()), store=MemoryStore(), make_step=step_factory(TOOLS))
    conduit = HTTPConduit(port=0, allow_no_token=True)  # this machine only
    async with manager, anyio.create_task_group() as group:
        url = await group.start(conduit.serve, manager)
        for line in await client(url):
            print(line)
        group.cancel_scope.cancel()


if __name__ == "__main__":
    tracing.configure_logging(level="warning")  # on stderr: the request log would drown the client's lines
    anyio.run(main)
