"""``memory_tools``: ``remember`` and ``recall`` as tools a model calls, always for the run's caller."""

from __future__ import annotations

from typing import Any

from cognitive.memory._protocol import MEMORY, Memory, Scope
from loop import FunctionTool, RunContext, UsageError, require, tool
from loop.checks import positive_int

MAX_TEXT = 2_000  # characters a remembered text may hold: a fact, not a document


def memory_tools(memory: Memory, *, k: int = 5, space: str = MEMORY) -> tuple[FunctionTool, FunctionTool]:
    """Two tools over ``memory``: ``remember(text)`` keeps a fact about the user, ``recall(query)`` lists the
    ``k`` remembered facts closest to ``query`` with their scores (cosine similarity, 1 at best).

    Both act for the run's caller (``Scope.of(context.caller, space)``, from the ``loop.RunContext`` a conduit
    sets), never for anyone the model names: the scope is no parameter of theirs, and a model that sends one
    gets an error result. An item ``remember`` keeps has ``meta={"by": "tool"}`` and the conversation the run
    answers in as its ``source`` (``loop.RunContext.conversation``). Give them to the step (``Step(provider, tools=[*memory_tools(memory)])``).

    Raises ``UsageError`` when ``memory`` is not a ``Memory``, ``k`` is not a positive integer or ``space`` is not
    a non-empty string.
    """
    require(memory, Memory, "memory_tools", "a Memory (something with remember and recall)")
    positive_int("memory_tools k", k)
    if not isinstance(space, str) or not space:
        raise UsageError(f"memory_tools space must be a non-empty string, got {space!r}")

    @tool(name="remember")
    async def remember(text: str, context: RunContext[Any]) -> str:
        """Remember a durable fact about the user (their name, where they live, a preference, a plan) for later
        conversations. Write it as one short sentence that stands on its own.

        Args:
            text: the fact, e.g. "The user is allergic to peanuts."
        """
        text = text.strip()
        if not text:
            raise UsageError("there is nothing to remember: text is empty")
        if len(text) > MAX_TEXT:
            raise UsageError(f"a fact to remember is at most {MAX_TEXT} characters; this one has {len(text)}")
        item = await memory.remember(Scope.of(context.caller, space), text, source=context.conversation or "",
                                     meta={"by": "tool"})
        return f"Remembered (id {item.id})."

    @tool(name="recall")
    async def recall(query: str, context: RunContext[Any]) -> str:
        """Search what you remember about the user from earlier conversations.

        Args:
            query: what to look for, e.g. "where the user lives"
        """
        if not query.strip():
            raise UsageError("query is empty: say what to look for")
        found = await memory.recall(Scope.of(context.caller, space), query, k=k)
        if not found:
            return "Nothing is remembered about that."
        return "\n".join(f"- [{r.score:.2f}] {r.item.text}" for r in found)

    return remember, recall
