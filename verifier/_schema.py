"""``SchemaVerifier``: the answer must hold a JSON value of a given type or JSON schema."""

from __future__ import annotations

import json
from typing import Any

from loop import OutputType, State, UsageError
from verifier._core import Result, Status

_MAX_PROBLEMS = 20  # a model fixes the first few; hundreds of lines would only bury the schema


class SchemaVerifier:
    """PASS when ``state.answer`` holds a JSON value that validates against ``type_or_schema``.

    ``type_or_schema`` is anything ``loop.OutputType.of`` takes: an attrs class, a dataclass, a TypedDict, a
    pydantic model, a JSON-schema dict, or an ``OutputType``. The JSON is found as ``OutputType.extract`` finds
    it (the whole answer, a fenced block, or an object in the prose). A FAIL report says what is wrong (no
    answer, no JSON, or each validation error with its path) and shows the schema to follow. ``output`` is the
    ``OutputType`` it checks against.
    """

    def __init__(self, type_or_schema: Any, *, name: str = "schema") -> None:
        if not isinstance(name, str) or not name:
            raise UsageError(f"SchemaVerifier's name= must be a non-empty string, got {name!r}")
        self.name = name
        self.output: OutputType[Any] = OutputType.of(type_or_schema)

    async def verify(self, state: State) -> Result:
        answer = state.answer
        if answer is None:
            return self._fail("There is no answer to check: the conversation has no assistant reply with text.")
        try:
            value = self.output.extract(answer)
        except UsageError as exc:
            return self._fail(f"The answer cannot be read as `{self.output.name}`: {exc}.")
        problems = self.output.errors(value)
        if not problems:
            try:
                self.output.parse(value)
            except UsageError as exc:  # the class's own validators refuse what the schema allows
                return self._fail(f"The answer's JSON matches the schema but is refused: {exc}.")
            return Result(self.name, Status.PASS)
        count = "1 problem" if len(problems) == 1 else f"{len(problems)} problems"
        lines = [f"- {problem}" for problem in problems[:_MAX_PROBLEMS]]
        if len(problems) > _MAX_PROBLEMS:
            lines.append(f"- … and {len(problems) - _MAX_PROBLEMS} more")
        return self._fail(f"The answer's JSON does not match the `{self.output.name}` schema ({count}):\n\n"
                          + "\n".join(lines))

    def _fail(self, what: str) -> Result:
        schema = json.dumps(self.output.schema, indent=2, ensure_ascii=False)
        return Result(self.name, Status.FAIL,
                      f"{what}\n\nReply with one JSON value that follows this schema:\n\n```json\n{schema}\n```")

    def __repr__(self) -> str:
        return f"SchemaVerifier({self.output.name}, name={self.name!r})"
