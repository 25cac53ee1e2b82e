"""``SameQuestion``: a model asked whether a remembered question and a new one ask for the same answer, the
semantic cache's last look before it answers from memory.

An embedding places a question near another sharing its words, whatever word differs: "enable" and "disable
two-factor authentication", "Celsius to Fahrenheit" and back, score as close as two wordings of one question.
A model reading both questions together sees the difference. It costs a model call, a short one (one word out),
made only for a question close enough to a remembered one to be answered from it.
"""

from __future__ import annotations

import re
from cognitive._pattern import check_prompt
from cognitive.memory._aside import Aside
from loop import TurnRunner, require

__all__ = ["JUDGE_PROMPT", "SameQuestion", "verdict"]

JUDGE_PROMPT = (
    "An assistant keeps the answers it gave and may reuse one for a new message. Below are the message an answer "
    "was written for and a new message. Reply yes when both ask for the same thing, so that the same answer, word "
    "for word, is right for both. Reply no when they differ in anything the answer depends on: a name, a place, a "
    "number, a date, a product, an action and its opposite, the direction of a conversion. Reply with one word: "
    "yes or no.")
"""The instruction ``SameQuestion`` gives its model by default."""

_WORD = re.compile(r"[^\W\d_]+")


def verdict(text: str) -> bool | None:
    """What a judge's reply says: ``True`` when its first word is yes, ``False`` when no, ``None`` otherwise."""
    first = _WORD.search(text)
    word = first.group(0).casefold() if first else ""
    return True if word == "yes" else False if word == "no" else None


class SameQuestion:
    """Asks a model, through ``step``, whether two messages ask for the same answer.

    The request is the instruction ``prompt`` as a system turn and both messages in one user turn; it goes
    through the step's tool-free, view-free ``derive`` when it has one, inside ``loop.branch("SameQuestion")``:
    charged to the run's budgets, its events published under its own run path, never taken for the
    conversation. ``await judge(remembered, asked)`` is ``True`` (yes), ``False`` (no) or ``None`` (a reply
    that is neither, which a cache takes for no).

    Raises ``UsageError`` when ``step`` has no ``turn`` or ``prompt`` is not a non-empty string.
    """

    __slots__ = ("step", "prompt", "_aside")

    def __init__(self, step: TurnRunner, *, prompt: str = JUDGE_PROMPT) -> None:
        require(step, TurnRunner, "SameQuestion", "a TurnRunner (the step) to ask the model")
        self.prompt = check_prompt("SameQuestion prompt", prompt)
        self.step = step
        self._aside = Aside("SameQuestion", step)

    async def __call__(self, remembered: str, asked: str) -> bool | None:
        return verdict(await self._aside(self.prompt, f"The message the answer was written for:\n{remembered}\n\n"
                                                      f"The new message:\n{asked}"))

    def __repr__(self) -> str:
        return f"SameQuestion({self.step!r})"
