"""Memory in the prompt: what a long chat costs per request when the model is shown a short window of recent
messages and what is remembered, rather than the whole history.

The chat: ``MESSAGES`` user messages, each telling the assistant something about the user or asking about it
(about ``len(TOLD[0])`` characters), each answered with about ``ANSWER_CHARS`` characters, one conversation. Run
twice on a ``provider.Function`` model that counts every prompt (``loop.approx_tokens`` over the turns as the
provider receives them, and their characters): once with the full history, once as a memory-backed agent --
``Remembering(SingleShot(step), memory, policy=remember_messages)`` on a step showing
``FitToWindow(WINDOW_TOKENS)`` then ``RecallMemory(memory, k=5)`` (a ``SQLiteMemory`` in memory, ``HashingEmbedder``).

(a) the last request's prompt, full history against the memory view, in tokens and in characters.
    Target: full / memory >= 3x in tokens.
(b) all requests of the chat together, in tokens. For contrast.
"""

from __future__ import annotations

import anyio

import provider
from cognitive import Pattern, SingleShot
from cognitive.context._window import FitToWindow
from cognitive.memory._recall import MEMORY_KIND, RecallMemory
from cognitive.memory._remember import Remembering, remember_messages
from cognitive.memory._sqlite import SQLiteMemory
from loop import Caller, Request, Role, State, Step, Text, Transform, approx_tokens, run_context
from provider._embedder import HashingEmbedder
from tests.benchmarks._harness import Figure

MESSAGES = 50
ANSWER_CHARS = 600
WINDOW_TOKENS = 600
RATIO_TARGET = 3.0
TOLD = [
    "By the way, I live in {city} now, in a flat near the old harbour, and I walk to work most days.",
    "My sister {name} is visiting next month; she is vegetarian, so keep that in mind for restaurant ideas.",
    "I have started learning the {instrument}; I practise for half an hour every evening after dinner.",
    "Could you remind me what I told you about where I live, and suggest a weekend walk near there?",
    "I am allergic to {food}, so please never suggest recipes that use it, even in small amounts.",
]
_WORDS = {"city": ["Lisbon", "Oslo", "Porto", "Lyon", "Turin"], "name": ["Ana", "Mia", "Eva", "Ida", "Zoe"],
          "instrument": ["cello", "piano", "flute", "violin", "guitar"],
          "food": ["peanuts", "shellfish", "sesame", "celery", "mustard"]}
_ANSWER = ("Thank you for telling me. I will keep it in mind for what we plan together. Here are some thoughts "
           "on what you said, with a few suggestions you might like to try over the coming weeks. ")


def message(i: int) -> str:
    words = {key: values[i % len(values)] for key, values in _WORDS.items()}
    return f"({i + 1}) " + TOLD[i % len(TOLD)].format(**words)


class Counting:
    """The model: a fixed answer of ``ANSWER_CHARS`` characters; counts each prompt in tokens and characters."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.chars: list[int] = []
        self.shown_memory = 0

    def __call__(self, request: Request) -> str:
        self.tokens.append(approx_tokens(request.turns))
        self.chars.append(sum(len(t.text) for t in request.turns))
        self.shown_memory += any(t.kind == MEMORY_KIND for t in request.turns)
        return (_ANSWER * (ANSWER_CHARS // len(_ANSWER) + 1))[:ANSWER_CHARS]


async def _chat(messages: int, model: Counting, memory: SQLiteMemory | None) -> None:
    transforms: list[Transform] = []
    if memory is not None:
        transforms = [FitToWindow(WINDOW_TOKENS), RecallMemory(memory, k=5)]
    step = Step(provider.Function(model), transforms=transforms)
    agent: Pattern = SingleShot(step)
    if memory is not None:
        agent = Remembering(agent, memory, policy=remember_messages)
    state = State().append(Role.SYSTEM, Text("You are a helpful personal assistant."))
    with run_context(caller=Caller("ada", "bench")):
        for i in range(messages):
            state = await agent.run(state.append(Role.USER, Text(message(i))))
    assert len(state) == 1 + 2 * messages and not any(t.kind == MEMORY_KIND for t in state)


async def _measure(messages: int) -> tuple[Counting, Counting]:
    full, remembered = Counting(), Counting()
    await _chat(messages, full, None)
    async with SQLiteMemory(":memory:", HashingEmbedder()) as memory:
        await _chat(messages, remembered, memory)
    assert remembered.shown_memory == messages - 1  # every request after the first was shown memories
    return full, remembered


def run(quick: bool = False) -> list[Figure]:
    """Measure (a) and (b); ``quick`` runs a short chat (for the smoke test)."""
    messages = 8 if quick else MESSAGES
    full, remembered = anyio.run(_measure, messages, backend="asyncio")
    chat = (f"a {messages}-message chat, answers of {ANSWER_CHARS} characters; memory view: "
            f"FitToWindow({WINDOW_TOKENS}) + RecallMemory(k=5) over the remembered messages")
    return [
        Figure("(a) memory prompt", "last prompt, full history", float(full.tokens[-1]), "tokens",
               float(remembered.tokens[-1]), "window + recalled memories", low=RATIO_TARGET, on_ratio=True,
               target_text=f"full/memory >= {RATIO_TARGET:g}x", notes=(chat,)),
        Figure("(a) memory prompt", "last prompt, full history (characters)", float(full.chars[-1]), "chars",
               float(remembered.chars[-1]), "window + recalled memories", notes=(chat,)),
        Figure("(b) memory prompt", "all prompts of the chat, full history", float(sum(full.tokens)), "tokens",
               float(sum(remembered.tokens)), "window + recalled memories",
               notes=("the full history grows with every message; the memory view stays near its window's size",)),
    ]


if __name__ == "__main__":
    for figure in run():
        print(f"{figure.bench} | {figure.name}: {figure.value:,.0f} {figure.unit} vs {figure.baseline:,.0f} "
              f"({figure.baseline_name}) = {figure.ratio:.1f}x [{figure.verdict}]")
