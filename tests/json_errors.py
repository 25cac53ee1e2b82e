"""What ``json`` says is wrong with a text, for tests that check a report quotes it."""

from __future__ import annotations

import json

import pytest


def json_error(text: str) -> str:
    """What ``json`` finds wrong with ``text`` and where. Python 3.13 words some problems differently (a
    trailing comma is "Illegal trailing comma before end of object", at the comma), so tests ask ``json``."""
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads(text)
    return f"{caught.value.msg} at line {caught.value.lineno}, column {caught.value.colno}"
