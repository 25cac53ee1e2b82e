"""A question asked aside: a model asked something about a conversation (what facts it holds, whether two
questions are one), outside it.

The request goes through the step's tool-free, view-free ``derive`` when it has one, inside ``loop.branch(name)``:
charged to the run's budgets, its events published under its own run path, never taken for the conversation.
"""

from __future__ import annotations

from typing import cast

from loop import Deriver, Options, Role, State, Text, Turn, TurnRunner, branch, has

__all__ = ["Aside"]

_NO_TOOLS = Options(tool_choice="none")


class Aside:
    """Asks ``step``'s model one question aside, as the branch ``name``: ``await aside(instruction, text)`` is the
    reply's text (``""`` for none)."""

    __slots__ = ("name", "_asker")

    def __init__(self, name: str, step: TurnRunner) -> None:
        self.name = name
        self._asker = cast(Deriver, step).derive(tools=(), transforms=()) if has(step, Deriver) else step

    async def __call__(self, instruction: str, text: str) -> str:
        request = State([Turn(Role.SYSTEM, (Text(instruction),)), Turn(Role.USER, (Text(text),))])
        with branch(self.name):
            answered = await self._asker.turn(request, _NO_TOOLS)
        return answered.answer or ""
