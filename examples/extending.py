"""Extending the framework: your own provider, tool, verifier, pattern and store, each checked by the shipped
conformance check for its protocol.

    python examples/extending.py

Every extension point is a small protocol, so each piece below is a plain class with one or two methods.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio

from loop import (
    Finish,
    Request,
    Role,
    State,
    Step,
    Text,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Turn,
    Usage,
    UsageDelta,
    scope,
)
from verifier import Result, Status

# -- a provider: stream deltas for a request -------------------------------------------------------------


class Shouter:
    """A "model" that answers in capitals, streamed word by word. Asked "define WORD" with a ``define`` tool on
    offer, it calls the tool and answers from its result; asked to improve its answer, it adds what it left out;
    anything else, it repeats back.

    A provider has one method, ``stream(request)``, returning an async iterator of deltas: ``TextDelta``
    for text, ``ToolCallDelta`` for tool calls, ``UsageDelta`` for tokens and a ``Finish`` at the end. The step
    turns them into an assistant turn. Raise a ``loop.errors.ProviderError`` when there is no answer.
    """

    async def stream(self, request: Request) -> AsyncIterator[Any]:
        last = request.turns[-1]
        question = next((t.text for t in request.turns if t.role is Role.USER), "")
        if last.role is Role.USER and question.startswith("define ") and last.text == question \
                and any(spec.name == "define" for spec in request.tools):
            arguments = json.dumps({"word": question.removeprefix("define ").strip()})
            yield ToolCallDelta(0, id=f"call_{len(request.turns)}", name="define", arguments_fragment=arguments)
            yield Finish("tool_calls")
            return
        if last.role is Role.TOOL:
            text = f"{question.removeprefix('define ')}: {last.tool_results[0].content}"
        elif last.role is Role.USER and last.text != question:  # asked to improve the answer before
            earlier = next((t.text for t in reversed(request.turns) if t.role is Role.ASSISTANT and t.text), "")
            text = f"{earlier}, as the dictionary says" if earlier else question
        else:
            text = last.text or "nothing to say"
        words = text.upper().split()
        for i, word in enumerate(words):
            yield TextDelta(word if i == 0 else " " + word)
            await anyio.sleep(0)  # a real stream waits on the network here
        yield UsageDelta(Usage(input_tokens=sum(len(t.text) for t in request.turns) // 4, output_tokens=len(words)))
        yield Finish("stop")


# -- a tool: a spec and an async call -----------------------------------------------------------------------


class Dictionary:
    """A tool written as a class (``@tool`` on a function is usually shorter): a ``spec`` the model reads and
    ``call(arguments)`` with arguments already checked against the spec's JSON schema."""

    spec = ToolSpec("define", "Define an English word.", {
        "type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"],
        "additionalProperties": False})
    timeout = 5.0  # seconds; optional, overrides the step's tool timeout

    def __init__(self, definitions: Mapping[str, str]) -> None:
        self._definitions = dict(definitions)

    async def call(self, arguments: Mapping[str, Any]) -> str:
        word = arguments["word"].lower()
        if word not in self._definitions:
            raise LookupError(f"no definition of {word!r}")  # becomes an error result the model reads
        return self._definitions[word]


# -- a verifier: a name and verify(state) --------------------------------------------------------------------


class Shouts:
    """Passes answers written all in capitals; FAIL tells the model what to fix, ERROR is for a broken check."""

    name = "shouts"

    async def verify(self, state: State) -> Result:
        answer = state.answer or ""
        if answer and answer == answer.upper():
            return Result(self.name, Status.PASS)
        return Result(self.name, Status.FAIL, "Write the whole answer in capital letters.")


# -- a pattern: run(state) -> state --------------------------------------------------------------------------


class Twice:
    """Asks the model, then asks it to improve its own answer once: a pattern is any object with
    ``async run(state) -> State``. It keeps settings only (one instance serves many conversations), names
    its place on the run path with ``loop.scope``, and records how the run went on its answer turn."""

    def __init__(self, step: Step, *, prompt: str = "Improve your answer.") -> None:
        self.step = step
        self.prompt = prompt

    async def run(self, state: State) -> State:
        with scope("Twice"):
            first = await self.step.turn(state)
            while first.last is not None and first.last.role is Role.TOOL:  # it called tools: answer from them
                first = await self.step.turn(first)
            asked = await self.step.submit(first, Role.USER, Text(self.prompt))
            second = await self.step.turn(asked)
            return second.with_outcome(data={"first": first.answer})


# -- a store: load and append, durable --------------------------------------------------------------------


class DictStore:
    """A store keeping conversations in a dict (a real one writes to a database). ``append`` makes the
    conversation the first ``start`` stored turns followed by ``turns`` and replaces its meta, all or nothing."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[list[Turn], dict[str, Any]]] = {}

    async def load(self, session_id: str) -> State | None:
        found = self._data.get(session_id)
        return None if found is None else State(found[0], found[1])

    async def append(self, session_id: str, start: int, turns: Sequence[Turn], meta: Mapping[str, Any]) -> None:
        from session import StoreConflict

        stored = self._data.get(session_id, ([], {}))[0]
        if start > len(stored):
            raise StoreConflict(f"session {session_id!r} holds {len(stored)} turns; cannot append at {start}")
        self._data[session_id] = (stored[:start] + list(turns), dict(meta))


async def main() -> None:
    from cognitive import WithVerification, new_turn_processor
    from cognitive.testing import check_pattern
    from loop.testing import check_tool
    from provider.testing import check_provider
    from session import Manager
    from session.testing import check_store
    from verifier.testing import check_verifier

    # Each protocol ships a conformance check: run it on your implementation in your own tests.
    dictionary = Dictionary({"loop": "a repeated sequence", "agent": "one who acts"})
    await check_provider(Shouter)
    await check_tool(dictionary, {"word": "loop"})
    asked = State().append(Role.USER, Text("q"))
    await check_verifier(Shouts(), passing=asked.append(Role.ASSISTANT, Text("YES")),
                         failing=asked.append(Role.ASSISTANT, Text("no")))
    await check_pattern(Twice)
    await check_store(DictStore)
    print("provider, tool, verifier, pattern and store pass their conformance checks")

    step = Step(Shouter(), tools=[dictionary])
    agent = WithVerification(Twice(step), step, verifiers=[Shouts()])
    state = await agent.run(State().append(Role.USER, Text("define loop")))
    print(f"answer: {state.answer}  (outcome {state.outcome.status}, first try {state.outcome.data['WithVerification/Twice']})")

    async with Manager(new_turn_processor(lambda executor: Twice(executor)), provider=Shouter(),
                       store=(store := DictStore())) as manager:
        session = await manager.open("demo")
        await session.ask("keep this conversation")
    print(f"stored turns: {[t.text for t in (await store.load('demo')) or ()]}")


if __name__ == "__main__":
    anyio.run(main)
