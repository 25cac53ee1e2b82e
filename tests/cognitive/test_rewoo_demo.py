"""The ReWOO-against-ReAct demonstration: both answer every hop count right, ReWOO's calls stay at two, and its
prompt-token advantage grows with the hops.

The brief asked for at least 3x fewer prompt tokens at 3 hops. The simulation does not show that, and it is not
tuned to: at 3 hops ReAct makes 4 calls and ReWOO 2, so with short lookup results the saving is bounded near 2x
and the planner's longer prompt eats most of it (about 1.2x). The assertions below are what it does show.
"""

from examples.rewoo_vs_react import PEOPLE, compare


async def test_rewoo_pays_fewer_prompt_tokens_and_the_saving_grows_with_hops() -> None:
    costs = await compare((3, 5, 8))
    by = {(c.pattern, c.hops): c for c in costs}
    for hops in (3, 5, 8):
        react, rewoo = by["ReAct", hops], by["ReWOO", hops]
        assert PEOPLE[hops] in react.answer and PEOPLE[hops] in rewoo.answer
        assert (react.calls, rewoo.calls) == (hops + 1, 2)
        assert rewoo.prompt_tokens < react.prompt_tokens
    ratios = [by["ReAct", h].prompt_tokens / by["ReWOO", h].prompt_tokens for h in (3, 5, 8)]
    assert ratios == sorted(ratios) and ratios[0] < ratios[1] < ratios[2]
    assert ratios[2] >= 3, ratios
