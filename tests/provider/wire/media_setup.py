"""What the media wire tests share: small images and documents, a user turn showing them, a weather tool that
answers with a radar picture, and the JSON text a body is compared as."""

from __future__ import annotations

import base64
import json
from typing import Any

from loop import Image, Role, State, Text, tool

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS\xde"
RADAR = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00!\xf9\x04\x00\x00\x00\x00\x00,"
PDF = b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\n%%EOF\n"
NOTES = "Paris: 18.5 °C, cloudy.\n".encode()
PNG64, RADAR64, PDF64 = (base64.b64encode(b).decode() for b in (PNG, RADAR, PDF))
CAT = "https://example.com/cat.jpg"
PAPER = "https://example.com/paper.pdf"
QUESTION = "What is in these?"


def shown(*media: Any, system: str | None = "Describe briefly.", name: str | None = None) -> State:
    """A conversation whose user turn asks ``QUESTION`` about ``media``."""
    state = State() if system is None else State().append(Role.SYSTEM, Text(system))
    return state.append(Role.USER, Text(QUESTION), *media, name=name)


@tool
def get_weather(location: str, unit: str = "celsius") -> Any:
    """The weather radar at a place.

    Args:
        location: city and country.
        unit: celsius or fahrenheit.
    """
    return [f"Radar for {location} ({unit})", Image(data=RADAR)]


WEATHER_PARAMETERS = {"type": "object",
                      "properties": {"location": {"type": "string", "description": "city and country."},
                                     "unit": {"type": "string", "description": "celsius or fahrenheit.",
                                              "default": "celsius"}},
                      "required": ["location"], "additionalProperties": False}


def canonical(value: Any) -> str:
    """``value`` as compact JSON keeping its key order, as the providers send it: bodies compare field by field
    and in order."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

