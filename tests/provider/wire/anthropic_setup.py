"""What the Anthropic wire tests share: the provider aimed at the loopback server, two tools, and stream helpers."""

from __future__ import annotations

from typing import Any

from loop import Request, Role, State, Text, Turn, tool
from provider import Anthropic
from tests.provider.wire.server import WireServer, fixture

MODEL = "claude-sonnet-4-5"
ASK = "What is the weather in Paris?"
REQUEST = Request((Turn(Role.USER, (Text(ASK),)),))
START = State().append(Role.USER, Text(ASK))


def anthropic(wire: WireServer, **settings: Any) -> Anthropic:
    """The provider under test, talking to the loopback server only."""
    return Anthropic(MODEL, api_key="test-key", base_url=wire.url, **settings)


def stream(name: str) -> bytes:
    """A recorded Anthropic stream from ``fixtures/anthropic``."""
    return fixture(f"anthropic/{name}.sse")


async def collect(provider: Anthropic, request: Request = REQUEST) -> list[Any]:
    return [delta async for delta in provider.stream(request)]


def cut_where_it_ends(data: bytes) -> dict[str, Any]:
    """``wire.reply`` arguments that send ``data`` (which may end mid-line) and then drop the connection
    without finishing the body, as a peer that went away would."""
    events = data.split(b"\n\n")
    chunks = [event + b"\n\n" for event in events[:-1]] + ([events[-1]] if events[-1] else [])
    return {"body": [*chunks, b"never sent"], "cut_after": len(chunks)}


@tool
def get_weather(location: str, unit: str = "celsius") -> str:
    """The current weather somewhere.

    Args:
        location: city and country.
        unit: celsius or fahrenheit.
    """
    return f"18 degrees {unit}, sunny in {location}"


@tool
def get_time(timezone: str) -> str:
    """The local time in a time zone.

    Args:
        timezone: an IANA zone name such as Europe/Paris.
    """
    return f"14:05 in {timezone}"
