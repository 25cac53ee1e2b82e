"""``loop.testing.check_tool``: tools that keep the contract pass, and each breach is named."""

from collections.abc import Mapping
from typing import Any

import pytest

from loop import ToolSpec, UsageError, tool
from loop.errors import ConformanceError
from loop.testing import check_tool

OBJECT = {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}


@tool
async def define(word: str) -> str:
    """Define a word."""
    return f"{word}: a word"


@tool
def count(word: str) -> dict[str, int]:
    """Count a word's letters (a sync tool, returning data)."""
    return {"letters": len(word)}


class Unshowable:
    """Neither JSON nor text."""

    def __str__(self) -> str:
        raise ValueError("no text for this")


class Handmade:
    """A tool written as a class."""

    def __init__(self, spec: ToolSpec, value: Any = "ok", timeout: Any = None, sync: bool = False) -> None:
        self.spec = spec
        self._value = value
        if timeout is not None:
            self.timeout = timeout
        if sync:
            self.call = lambda arguments: self._value  # type: ignore[method-assign]

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        return self._value


async def test_tools_that_keep_the_contract_pass() -> None:
    await check_tool(define, {"word": "loop"})
    await check_tool(count, {"word": "loop"})
    await check_tool(Handmade(ToolSpec("define", "Define a word.", OBJECT), timeout=5), {"word": "x"})


@pytest.mark.parametrize(("made", "message"), [
    (Handmade("not a spec"), "spec must be a loop.ToolSpec"),  # type: ignore[arg-type]
    (Handmade(ToolSpec("two words", "Define.", OBJECT)), "letters, digits"),
    (Handmade(ToolSpec("define", "  ", OBJECT)), "description"),
    (Handmade(ToolSpec("define", "Define.", {"type": "string"})), "JSON schema of an object"),
    (Handmade(ToolSpec("define", "Define.", {"type": "object", "properties": {"word": {"type": 5}}})),
     "not a valid JSON schema"),
    (Handmade(ToolSpec("define", "Define.", OBJECT), timeout=0), "timeout must be a positive number"),
    (Handmade(ToolSpec("define", "Define.", OBJECT), sync=True), "async method"),
    (Handmade(ToolSpec("define", "Define.", OBJECT), value=Unshowable()), "cannot be shown to a model"),
])
async def test_a_breach_is_named(made: Any, message: str) -> None:
    with pytest.raises(ConformanceError, match=message):
        await check_tool(made, {"word": "x"})


async def test_a_tool_that_fails_through_the_pipeline_is_named() -> None:
    class Fragile(Handmade):
        calls = 0

        async def call(self, arguments: Mapping[str, Any]) -> Any:
            type(self).calls += 1
            if type(self).calls > 1:
                raise RuntimeError("only once")
            return "ok"

    with pytest.raises(ConformanceError, match="through a step's tool pipeline"):
        await check_tool(Fragile(ToolSpec("define", "Define.", OBJECT)), {"word": "x"})


async def test_arguments_that_do_not_fit_the_schema_are_the_callers_mistake() -> None:
    with pytest.raises(UsageError, match="do not fit 'define'"):
        await check_tool(define, {"wrong": 1})
