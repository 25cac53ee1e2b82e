"""``ChainOfThought``: one turn that reasons step by step, zero-shot or from worked examples, and answers."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable
from typing import Any, cast

from cognitive._kinds import PatternKind
from cognitive._pattern import answering, check_prompt, check_start
from loop import (Options, Role, State, Text, TurnExecutor, UsageError, Viewer, add_turn, branch, current_scope,
                  has, provider_info, require, scope, tracing)

PROMPT = """\
Before you answer the latest request, reason it through step by step in writing: say what is asked, work \
toward the result one small step at a time, and check each step before you build on it. When you are done, \
write "Answer:" on a line of its own followed by the final answer alone, as the person should read it, \
without the working."""

EXAMPLES_HEADING = "Worked examples of the reasoning wanted:"
SCHEMA_NOTE = "Write the final answer after \"Answer:\" as one JSON value that follows this schema:\n{schema}"

REASONING_MODELS: tuple[str, ...] = (
    "o1*", "o3*", "o4*",                      # OpenAI's o-series
    "gpt-5", "gpt-5-*", "gpt-5.*",            # GPT-5 and its sizes and versions (not the chat models, below)
    "deepseek-reasoner*", "deepseek-r1*",     # DeepSeek-R1
    "qwq*", "*-thinking*",                    # QwQ, and models named for their thinking mode
    "gemini-2.5-pro*",                        # thinks on every request
)
"""Model names (``fnmatch`` patterns, matched without case, also against the part after the last ``/``, as in
``openai/o3-mini``) of models that reason on their own before they answer. Claude reasons internally only with
extended thinking switched on, which is what ``Options.reasoning_effort`` asks of it, so Claude (and any model)
counts as reasoning when the effort is set, not by its name. ``gemini-2.5-flash`` is left out: its thinking can
be switched off, and is off on its lite size."""

NOT_REASONING: tuple[str, ...] = ("gpt-5*chat*",)
"""Names matching ``REASONING_MODELS`` that are chat models without reasoning (``gpt-5-chat-latest``)."""

_ANSWER = re.compile(r"^[ \t>*#_]*(?:final[ \t]+)?answer[ \t*_]*:[ \t*_]*", re.IGNORECASE | re.MULTILINE)
_TOOL_FREE = Options(tool_choice="none")
_log = tracing.logger("cognitive.chain_of_thought")
_told: set[str] = set()  # the models already logged as reasoning on their own, once per process


class ChainOfThought:
    """One model turn that reasons step by step before it answers; the person sees the answer, not the working.

    The instructions (``prompt``, then the worked ``examples`` when given: few-shot, else zero-shot) go into
    the conversation as a system turn (``meta["kind"] == "cot"``). The model then works in a branch, tools
    off, so its working is neither streamed nor stored as the answer. What follows the working's last
    ``Answer:`` line is written as the answer turn (``meta["kind"] == "cot_answer"``), the whole working kept
    in its ``meta["working"]``. A reply with no ``Answer:`` line is written whole, its outcome ``degraded``
    (the answer could not be told from the working). When the run's answer is typed (``WithOutput``), the
    instructions ask for the final answer as JSON in that schema.

    **Reasoning models.** A model that reasons on its own before answering gains nothing from being told to,
    and may lose: on one, the pattern adds nothing and runs one plain tool-free turn on the main line, and logs
    so once per process and model. A model counts as reasoning when the step's options (with any
    ``loop.turn_options`` around the run) set ``reasoning_effort``, or when its name (the options' ``model``,
    else the provider's) matches ``REASONING_MODELS`` and not ``NOT_REASONING``. ``reasoning_models``:
    ``None`` for that rule, more name patterns to add to ``REASONING_MODELS``, or ``True``/``False`` to treat
    the model as reasoning, or not, whatever its name.

    ``examples``: ``(question, worked answer)`` pairs of strings, each worked answer ending in its own
    ``Answer:`` line, as the model's should. ``step`` is a ``TurnExecutor`` (a ``Step``). Costs one model
    call. The outcome data holds ``prompted`` (whether the instructions were given), ``examples`` (how many),
    ``model`` (the name, when known), ``reasoning_model`` and ``separated`` (whether an ``Answer:`` line was
    found).
    """

    __slots__ = ("step", "examples", "reasoning_models", "prompt", "_options", "_model")

    def __init__(self, step: TurnExecutor, *, examples: Iterable[tuple[str, str]] = (),
                 reasoning_models: bool | Iterable[str] | None = None, prompt: str = PROMPT) -> None:
        require(step, TurnExecutor, "ChainOfThought")
        self.step = step
        self.examples = _check_examples(examples)
        self.reasoning_models = _check_models(reasoning_models)
        self.prompt = check_prompt("prompt", prompt)
        self._options = cast(Viewer, step).options if has(step, Viewer) else Options()
        self._model = provider_info(step).model

    async def run(self, state: State) -> State:
        check_start(state, "ChainOfThought")
        with scope("ChainOfThought"), tracing.span("invoke_agent ChainOfThought", {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "ChainOfThought"}) as span:
            options = self._options.merge(current_scope().options)
            model = options.model or self._model
            shape = answering()
            final = _TOOL_FREE if shape is None else _TOOL_FREE.merge(shape)
            if self._reasons(model, options):
                span.set_attribute("chain_of_thought.prompted", False)
                _tell(model)
                state = await self.step.turn(state, final)
                return state.with_outcome(data={"prompted": False, "examples": 0, "model": model,
                                                "reasoning_model": True})
            span.set_attribute("chain_of_thought.prompted", True)
            text = self._instructions(None if shape is None else shape.output_schema)
            state = await add_turn(self.step, state, Role.SYSTEM, Text(text), meta={"kind": PatternKind.COT})
            with branch("working"):
                worked = await self.step.turn(state, _TOOL_FREE)
            working = worked.answer or ""
            answer, found = split_answer(working)
            span.set_attribute("chain_of_thought.separated", found)
            state = await self.step.submit(state, Role.ASSISTANT, Text(answer),
                                           meta={"kind": PatternKind.COT_ANSWER, "working": working})
            data = {"prompted": True, "examples": len(self.examples), "model": model, "reasoning_model": False,
                    "separated": found}
            if not answer:
                return state.with_outcome("degraded", "the model wrote no answer", data=data)
            if not found:
                return state.with_outcome("degraded", "the reply had no \"Answer:\" line, so it is given whole, "
                                                      "working included", data=data)
            return state.with_outcome(data=data)

    def _reasons(self, model: str | None, options: Options) -> bool:
        setting = self.reasoning_models
        if isinstance(setting, bool):
            return setting
        if options.reasoning_effort is not None:
            return True
        return model is not None and reasoning_model(model, setting)

    def _instructions(self, schema: Any) -> str:
        parts = [self.prompt]
        if self.examples:
            shown = "\n\n".join(f"Question: {q.strip()}\n{a.strip()}" for q, a in self.examples)
            parts.append(f"{EXAMPLES_HEADING}\n\n{shown}")
        if schema is not None:
            parts.append(SCHEMA_NOTE.format(schema=json.dumps(schema, separators=(",", ":"), ensure_ascii=False)))
        return "\n\n".join(parts)

    def __repr__(self) -> str:
        settings = [repr(self.step)]
        if self.examples:
            settings.append(f"examples={len(self.examples)}")
        if self.reasoning_models is not None:
            settings.append(f"reasoning_models={self.reasoning_models!r}")
        if self.prompt != PROMPT:
            settings.append("prompt=...")
        return f"ChainOfThought({', '.join(settings)})"


def reasoning_model(name: str, extra: Iterable[str] | None = None) -> bool:
    """Whether a model called ``name`` reasons on its own: it matches ``REASONING_MODELS`` (or one of the
    ``extra`` patterns) and not ``NOT_REASONING``, without case, whole or after its last ``/``."""
    names = {name.lower(), name.rsplit("/", 1)[-1].lower()}
    if any(fnmatch.fnmatchcase(n, p) for n in names for p in NOT_REASONING):
        return False
    patterns = (*REASONING_MODELS, *(p.lower() for p in extra or ()))
    return any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns)


def split_answer(text: str) -> tuple[str, bool]:
    """The final answer in a reply (what follows its last ``Answer:`` line) and whether one was found; without
    one, the whole text."""
    matches = list(_ANSWER.finditer(text))
    if not matches:
        return text.strip(), False
    answer = text[matches[-1].end():].strip()
    return (answer, True) if answer else (text.strip(), False)


def _tell(model: str | None) -> None:
    key = model or ""
    if key not in _told:
        _told.add(key)
        _log.info("the model reasons on its own: no chain-of-thought prompt is added", model=model)


def _check_examples(examples: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(examples, (str, bytes)) or not isinstance(examples, Iterable):
        raise UsageError(f"examples must be a list of (question, worked answer) pairs, got {examples!r}")
    checked = []
    for index, pair in enumerate(examples):
        if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                or not all(isinstance(s, str) and s.strip() for s in pair)):
            raise UsageError(f"example {index} must be a (question, worked answer) pair of non-empty strings, "
                             f"got {pair!r}")
        if not split_answer(pair[1])[1]:
            raise UsageError(f"example {index}'s worked answer must end with its own \"Answer: ...\" line, as the "
                             f"model's should; got {pair[1]!r}")
        checked.append((pair[0], pair[1]))
    return tuple(checked)


def _check_models(setting: Any) -> bool | tuple[str, ...] | None:
    if setting is None or isinstance(setting, bool):
        return setting
    if isinstance(setting, (str, bytes)) or not isinstance(setting, Iterable):
        raise UsageError("reasoning_models is None, True, False or a list of model-name patterns (e.g. "
                         f"['my-reasoner-*']), got {setting!r}")
    patterns = tuple(setting)
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern.strip():
            raise UsageError(f"reasoning_models' patterns are non-empty strings, got {pattern!r}")
    return patterns
