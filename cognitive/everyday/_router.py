"""``Router``: a model picks which pattern answers, as a typed choice that reaches code."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from cognitive._kinds import PatternKind
from cognitive._pattern import Pattern, check_start, left_open, picked_up
from loop import Role, State, Text, TurnRunner, UsageError, ask, branch, require, scope, tracing
from loop.checks import non_negative_int
from loop.errors import VerificationFailed

PROMPT = """\
Choose how the latest request should be handled. The routes are:

{routes}

Pick the one route that fits best."""


class Router:
    """Asks the model which of ``choices`` (route name -> ``Pattern``) should answer, then runs that pattern on
    the conversation.

    The choice is a typed answer (``{"route": name, "reason": "..."}``, the names as an enum) asked through
    ``step`` in a branch: the routing exchange never enters the conversation. Routing is a good job for a cheap
    model: pass ``step.derive(options=Options(model=...))``. A name that is not a route goes back to the
    model with the valid ones, up to ``max_retries`` times; if it still has not chosen one, the ``default``
    route runs and the outcome is ``degraded`` (without a ``default``, ``VerificationFailed`` is raised).
    ``descriptions`` (route name -> what it is for) are shown to the model. The answer's outcome records the
    route and the reason. Costs one routing call (more on a wrong name) plus the chosen pattern's.
    """

    __slots__ = ("choices", "step", "descriptions", "default", "max_retries", "instructions", "_schema")

    def __init__(
        self,
        choices: Mapping[str, Pattern],
        step: TurnRunner,
        *,
        descriptions: Mapping[str, str] | None = None,
        default: str | None = None,
        max_retries: int = 2,
        instructions: str = PROMPT,
    ) -> None:
        if not isinstance(choices, Mapping) or not choices:
            raise UsageError(f"Router needs choices: a non-empty mapping of route name -> Pattern, got {choices!r}")
        for name, pattern in choices.items():
            if not isinstance(name, str) or not name or "/" in name:
                raise UsageError(f"a route name is a non-empty string without '/', got {name!r}")
            require(pattern, Pattern, f"route {name!r}", "a Pattern (something with run(state))")
        require(step, TurnRunner, "Router", "a TurnRunner to choose with (e.g. a Step)")
        descriptions = dict(descriptions or {})
        unknown = sorted(set(descriptions) - set(choices))
        if unknown:
            raise UsageError(f"descriptions name routes that do not exist: {', '.join(map(repr, unknown))}; the "
                             f"routes are {', '.join(map(repr, choices))}")
        if default is not None and default not in choices:
            raise UsageError(f"default={default!r} is not a route; the routes are {', '.join(map(repr, choices))}")
        if not isinstance(instructions, str) or "{routes}" not in instructions:
            raise UsageError("instructions must be a string with a {routes} placeholder for the list of routes")
        self.choices: Mapping[str, Pattern] = MappingProxyType(dict(choices))
        self.step = step
        self.descriptions: Mapping[str, str] = MappingProxyType(descriptions)
        self.default = default
        self.max_retries = non_negative_int("max_retries", max_retries)
        self.instructions = instructions
        self._schema: dict[str, Any] = {
            "type": "object",
            "properties": {"route": {"type": "string", "enum": list(self.choices)},
                           "reason": {"type": "string"}},
            "required": ["route"],
            "additionalProperties": False,
        }

    async def run(self, state: State) -> State:
        check_start(state, "Router")
        with scope("Router"), tracing.span("invoke_agent Router", {"gen_ai.operation.name": "invoke_agent",
                                                                   "gen_ai.agent.name": "Router"}) as span:
            waited = picked_up(state)
            if waited is not None and waited.get("route") in self.choices:  # the caller answered: the route goes on
                route, reason, fallback = waited["route"], str(waited.get("reason", "")), bool(waited.get("fallback"))
            else:
                route, reason, fallback = await self._route(state)
            span.set_attribute("router.route", route)
            with scope(route):
                state = await self.choices[route].run(state)
            data = {"route": route, "reason": reason}
            if left_open(state):  # kept on the answer, for when the caller has answered
                return state.with_outcome(data={**data, "fallback": fallback})
            if fallback:
                return state.with_outcome("degraded", f"the router chose no valid route in {self.max_retries + 1} "
                                                      f"tries; the default route {route!r} answered",
                                          data={**data, "fallback": True})
            return state.with_outcome(data=data)

    async def _route(self, state: State) -> tuple[str, str, bool]:
        """The route the model chooses for ``state``, its reason, and whether the default stood in for it."""
        routes = "\n".join(f"- {name}" + (f": {self.descriptions[name]}" if name in self.descriptions else "")
                           for name in self.choices)
        with branch("route"):
            asking = state.append(Role.SYSTEM, Text(self.instructions.format(routes=routes)),
                                  meta={"kind": PatternKind.ROUTE})
            try:
                chosen = await ask(self.step, asking, self._schema, max_retries=self.max_retries)
            except VerificationFailed:
                if self.default is None:
                    raise
                return self.default, "", True
        return chosen.value["route"], chosen.value.get("reason", ""), False

    def __repr__(self) -> str:
        return f"Router({list(self.choices)}, {self.step!r})"
