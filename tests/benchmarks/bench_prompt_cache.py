"""Prompt caching on Anthropic's wire format: what a 20-turn ReAct conversation reads from the cache, and what
it costs at list prices.

The conversation runs through the real loop (``WithBudget(ReAct(Step(Anthropic(...))))``) against a loopback
server that answers like the Messages API and bills each request as Anthropic describes its prompt cache
(``tests/provider/wire/anthropic_cache.py``: a prefix is cached at each ``cache_control`` mark of 1,024 tokens
or more, and read back by a later request that starts the same, up to one of its marks or 20 blocks before
one). The agent has a 1,500-token system prompt and three tools; every turn but the last calls a tool whose
result is about 250 tokens. Token counts are the server's (a quarter of each block's JSON characters), the
same for both runs.

(a) Input behind a breakpoint: the share of input tokens, over turns 4 to 20, in a prefix that ends at a mark
    (read from the cache or written to it), against the share each prompt repeats of the one before it (the
    most any prefix cache could read). Target: >= 0.8.
(b) Input read from the cache over the same turns, against the same repeated share (informational: the ratio
    says how much of what could be read was read).
(c) The cost of the whole run at Claude Sonnet 4.5's list prices, with caching (the spend ``WithBudget`` puts in
    the outcome), against the same conversation sent with ``prompt_cache=False`` in the same run.
"""

from __future__ import annotations

from typing import Any

import anyio

from cognitive import ReAct, WithBudget
from loop import PRICES, Budget, Role, State, Step, Text, tool
from provider import Anthropic
from tests.benchmarks._harness import Figure
from tests.provider.wire.anthropic_cache import Billed, CachingAnthropic

MODEL = "claude-sonnet-4-5"
TURNS = 20
QUICK_TURNS = 6
AFTER = 3  # turns left out of the shares: the cache is still filling
TARGET_SHARE = 0.8
SYSTEM = "\n".join(
    f"{n}. When a question needs facts, look them up with the tools before answering; never guess a figure, a "
    f"date or a name. Quote the entry you rely on, say which entries disagree, and keep every number with its "
    f"unit and source. Rule {n} of the house style: short sentences, plain words, no filler."
    for n in range(1, 25))


@tool
def search(query: str, limit: int = 5) -> str:
    """Searches the reference library and returns the best matching entries.

    Args:
        query: what to look for, in plain words.
        limit: how many entries to return.
    """
    return f"Entries for {query!r}: " + " ".join(
        f"[{i}] A paragraph of the library on {query}, with the figures, their units and where they come from."
        for i in range(1, 10))


@tool
def read_entry(entry_id: str) -> str:
    """Reads one library entry in full.

    Args:
        entry_id: the entry's identifier, as search returns it.
    """
    return f"Entry {entry_id}."


@tool
def convert(value: float, from_unit: str, to_unit: str) -> str:
    """Converts a quantity between units.

    Args:
        value: the quantity.
        from_unit: its unit.
        to_unit: the unit wanted.
    """
    return f"{value} {from_unit} in {to_unit}"


def start() -> State:
    return (State().append(Role.SYSTEM, Text(SYSTEM))
            .append(Role.USER, Text("Collect what the library says about the twenty largest river basins.")))


async def conversation(server: CachingAnthropic, turns: int, *, cache: bool) -> tuple[list[Billed], float]:
    """Run the ``turns``-turn conversation; the server's bills, and the cost the run's outcome reports."""
    server.reset()
    for n in range(turns - 1):
        server.answer({"type": "text", "text": f"Looking up basin {n + 1}."},
                      {"type": "tool_use", "id": f"toolu_{n:04}", "name": "search",
                       "input": {"query": f"river basin {n + 1}", "limit": 9}})
    server.answer({"type": "text", "text": "Here is what the library says about each basin."})
    async with Anthropic(MODEL, api_key="bench-key", base_url=server.url, prompt_cache=cache) as model:
        step = Step(model, tools=[search, read_entry, convert])
        state = await WithBudget(ReAct(step, max_turns=turns), Budget(name="bench"), step=step).run(start())
    if state.outcome is None or len(server.billed) != turns:
        raise RuntimeError(f"the conversation took {len(server.billed)} requests, not {turns}")
    return list(server.billed), float(state.outcome.data["WithBudget"]["spent"]["cost"])


def _share(bills: list[Billed], part: Any) -> float:
    later = bills[AFTER:]
    return sum(part(b) for b in later) / sum(b.input_tokens for b in later)


def run(quick: bool = False) -> list[Figure]:
    turns = QUICK_TURNS if quick else TURNS
    server = CachingAnthropic()
    server.start()
    try:
        async def both() -> tuple[tuple[list[Billed], float], tuple[list[Billed], float]]:
            return (await conversation(server, turns, cache=True), await conversation(server, turns, cache=False))

        (bills, cost), (plain_bills, plain_cost) = anyio.run(both)
    finally:
        server.stop()
    behind = _share(bills, lambda b: b.read + b.written)
    read = _share(bills, lambda b: b.read)
    repeated = _share(bills, lambda b: b.repeated)
    price = PRICES["claude-sonnet-4"]
    input_tokens = sum(b.input_tokens for b in bills)
    if input_tokens != sum(b.input_tokens for b in plain_bills):
        raise RuntimeError("the cached and uncached runs sent different prompts")
    span = f"turns {AFTER + 1}-{turns}"
    return [
        Figure("(a) prompt cache", f"input behind a breakpoint, {span}", behind, "share", repeated,
               "repeated from the turn before", low=TARGET_SHARE, target_text=f">= {TARGET_SHARE}",
               notes=(f"{turns}-turn ReAct on the Anthropic wire format, {input_tokens:,} input tokens in all; "
                      f"marks per request: {', '.join(str(b.marks) for b in bills)}",)),
        Figure("(b) prompt cache", f"input read from the cache, {span}", read, "share", repeated,
               "repeated from the turn before",
               notes=("read / repeated: how much of what a prefix cache could read was read",)),
        Figure("(c) prompt cache", f"cost of the {turns}-turn run at list prices", cost, "USD", plain_cost,
               "prompt_cache=False, same run",
               notes=(f"Claude Sonnet 4.5: input ${price.input:g}, cache writes ${price.cache_write:g}, reads "
                      f"${price.cached_input:g}, output ${price.output:g} per million tokens; cost from the "
                      "WithBudget outcome",)),
    ]
