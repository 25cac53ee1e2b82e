"""``stop``: the stop sequences a Chat Completions request may send, and the cut they make in the answer.

As OpenAI does, the answer ends just before the first place any stop sequence starts: the sequence itself and
all that follows are not sent. The cut is made in the final answer the client receives (``message.content``, or
the streamed ``delta.content``), never in the agent's own turns: the model is not asked to stop, so a sequence in
its working text or in a tool call cannot break the run. A typed answer (``response_format`` ``json_object`` or
``json_schema``) is validated JSON, which a cut would break: a request asking for both is refused.
"""

from __future__ import annotations

from typing import Any

from session.openai._errors import OpenAIError, wrong_type

MAX_STOP = 4
"""The most stop sequences a request may send (OpenAI's limit)."""


def stop_of(raw: Any) -> tuple[str, ...]:
    """The stop sequences ``raw`` (the request's ``stop``) names: none for null or ``[]``, one for a string, up to
    ``MAX_STOP`` for an array of strings; each must hold at least one character. Raises ``OpenAIError`` (400,
    ``param`` "stop") naming the problem."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        sequences = [raw]
    elif isinstance(raw, list):
        if len(raw) > MAX_STOP:
            raise OpenAIError(400, f"Invalid 'stop': array too long. Expected an array with at most {MAX_STOP} "
                                   f"stop sequences, but got {len(raw)}.", param="stop", code="array_above_max_length")
        for i, item in enumerate(raw):
            if not isinstance(item, str):
                raise wrong_type(f"stop[{i}]", "a string", item)
        sequences = raw
    else:
        raise wrong_type("stop", "a string, an array of strings or null", raw)
    for i, sequence in enumerate(sequences):
        if not sequence:
            where = "stop" if isinstance(raw, str) else f"stop[{i}]"
            raise OpenAIError(400, f"Invalid '{where}': a stop sequence must hold at least one character.",
                              param=where, code="invalid_value")
    return tuple(dict.fromkeys(sequences))  # in order, once each


def cut(text: str, stop: tuple[str, ...]) -> str:
    """``text`` up to the first place a sequence of ``stop`` starts (all of it when none occurs)."""
    end = len(text)
    for sequence in stop:
        at = text.find(sequence, 0, end + len(sequence) - 1)
        if at != -1:
            end = at
    return text[:end]


class StopCut:
    """The cut made in text that arrives in pieces (a streamed answer): ``feed`` gives what may be sent now,
    holding back an end that could still grow into a stop sequence; ``flush`` gives that end once no more
    comes. After a stop sequence, nothing more is given (``stopped``)."""

    def __init__(self, stop: tuple[str, ...]) -> None:
        self.stop = stop
        self.stopped = False
        self._held = ""  # the end of the text so far that begins some stop sequence
        self._longest = max((len(s) for s in stop), default=0)

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        if not self.stop:
            return text
        pending = self._held + text
        kept = cut(pending, self.stop)
        if len(kept) < len(pending):
            self.stopped, self._held = True, ""
            return kept
        keep = 0  # the longest end of ``pending`` that a stop sequence begins with
        for size in range(1, min(self._longest, len(pending) + 1)):
            if any(s.startswith(pending[-size:]) for s in self.stop):
                keep = size
        self._held = pending[len(pending) - keep:] if keep else ""
        return pending[:len(pending) - keep]

    def flush(self) -> str:
        held, self._held = ("" if self.stopped else self._held), ""
        return held
