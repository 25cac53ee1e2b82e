"""The offline model most session tests talk to (a reply function for ``provider.Function``)."""

from __future__ import annotations

from loop import Request


def echo(request: Request) -> str:
    """Answers each message with the text of the last turn, upper-cased."""
    return request.turns[-1].text.upper()
