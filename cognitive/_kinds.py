"""``PatternKind``: the kinds of turn the patterns add, as ``meta["kind"]``."""

from __future__ import annotations

import enum


class PatternKind(enum.StrEnum):
    """The kinds of turn the patterns of this package add (``meta={"kind": PatternKind.BUDGET}``), read back with
    ``turn.kind == PatternKind.BUDGET``; ``loop.TurnKind`` has the kinds ``loop`` adds. Stored as plain strings."""

    BUDGET = "budget"
    """A system turn saying that a budget ran out and asking for a final answer without tools."""
    CODE_ACTION = "code_action"
    """A system turn telling the model to answer with a program (``CodeAction``)."""
    CODE_ACTION_ANSWER = "code_action_answer"
    """An assistant turn holding the answer a program printed; ``meta["attempt"]`` is the program's number."""
    CODE_ACTION_ERROR = "code_action_error"
    """A system turn saying why program number ``meta["attempt"]`` failed."""
    VERIFY_ANSWER = "verify_answer"
    """An assistant turn holding the final answer ``Verify`` separated from its working (kept in
    ``meta["working"]``)."""
    ROUTE = "route"
    """A system turn a ``Router`` or ``Autonomous`` adds to the branch that chooses the route or the next step (never
    to the conversation)."""
    STAGE = "stage"
    """A system turn giving one ``Chain`` stage its instructions; ``meta["stage"]`` names the stage."""
    COMPACTION = "compaction"
    """A system turn holding a summary of the conversation before it (``Summarize``): a view of the conversation
    shows the leading system turns, the first user message, the ``meta["kept"]`` turns just before the newest
    such turn, and everything from it on; the turns it summarizes stay stored."""
    LOOP_NOTE = "loop_note"
    """A system turn ``ReAct(detect_loops=True)`` adds after a repeated call's results, pointing the repeat out."""
    REWOO_PLAN = "rewoo_plan"
    """A system turn asking ``ReWOO``'s planner for a plan (in the planner's branch, never the conversation)."""
    REWOO_REPLAN = "rewoo_replan"
    """A system turn telling ``ReWOO``'s planner what was wrong with its plan (in the planner's branch)."""
    REWOO_EVIDENCE = "rewoo_evidence"
    """A system turn holding ``ReWOO``'s plan and the evidence its steps gathered, for the solver's answer."""
    WORK_NOTES = "work_notes"
    """A system turn holding what a multi-stage pattern's working stages found (their outputs, the tool calls
    and shortened results), written to the conversation before its answer stage; the stages' own turns stay
    in branches."""
    THOUGHT = "thought"
    """An assistant turn holding one step of reasoning on a search's line of thought (``meta["final"]`` when it
    states the final answer); search lines stay in branches."""
    PROPOSE = "propose"
    """A system turn asking a search's model for the next thoughts (in a branch)."""
    SCORE = "score"
    """A system turn asking a search's model to rate a line of thought (in a branch)."""
    SEARCH_LINE = "search_line"
    """A system turn holding the line of thought a search chose, written to the conversation before its answer."""
    MERGED = "merged"
    """A system turn listing the lines of thought a ``GraphOfThoughts`` aggregation merged (``meta["parents"]``: their
    node ids); a merged thought's state is the question, this turn and the merged thought (in branches)."""
    COT = "cot"
    """A system turn with ``ChainOfThought``'s instructions (and worked examples), before its answer."""
    COT_ANSWER = "cot_answer"
    """An assistant turn holding the final answer ``ChainOfThought`` separated from its working (``meta["working"]``)."""
    REFLECT = "reflect"
    """A system turn asking a search for a one-sentence lesson from a failed rollout (in a branch)."""
    MEMORY = "memory"
    """A system turn listing what is remembered about the caller (``RecallMemory``), shown just before the message it
    bears on and never stored; ``meta["items"]`` holds the ids of the items listed."""
