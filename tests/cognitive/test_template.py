"""Templates and the state path language they read values with."""

from __future__ import annotations

import dataclasses
import enum
from collections import namedtuple
from types import MappingProxyType
from typing import Any

import attrs
import pytest

from cognitive.prompts._paths import CONVERSATION_ROOTS, StatePath, TemplateError
from cognitive.prompts._template import Template, show
from loop import Role, State, Text, UsageError


@attrs.frozen
class Section:
    title: str
    words: int
    notes: str | None = None


@attrs.frozen
class Plan:
    title: str
    sections: tuple[Section, ...]
    by_name: Any = attrs.field(factory=dict)


@dataclasses.dataclass
class Draft:
    text: str
    _secret: str = "hidden"


class Plain:
    def __init__(self) -> None:
        self.label = "plain label"
        self._private = "no"

    def method(self) -> str:
        return "never called"

    @property
    def broken(self) -> str:
        raise ValueError("cannot compute")


PLAN = Plan("Tides", (Section("Intro", 150), Section("Moon", 400, "cite sources"), Section("Sun", 250)),
            MappingProxyType({"intro": Section("Intro", 150)}))


def base() -> State:
    return State().append(Role.USER, Text("Write about tides")).with_meta(
        plan=PLAN, current=1, section_key="intro", topic="tides",
        outline=MappingProxyType({"parts": ("a", "b", "c"), "meta-data": {"depth": 2}}),
    )


def render(text: str, *bindings: str, state: State | None = None, **values: Any) -> str:
    return Template(text, *bindings).render(base() if state is None else state, **values)


# -- the path language ---------------------------------------------------------------------------------------


def test_a_root_reads_a_meta_key() -> None:
    assert render("{topic}") == "tides"


def test_at_reads_an_attribute_of_an_attrs_object() -> None:
    assert render("{plan@title}") == "Tides"


def test_at_reads_a_key_of_a_frozen_mapping() -> None:
    assert render("{outline@parts#0}") == "a"
    assert render("{outline@meta-data@depth}") == "2"


def test_at_prefers_a_mapping_key_to_an_attribute() -> None:
    state = State().with_meta(box={"keys": "the key, not the method", "title": "t"})
    assert render("{box@keys}", state=state) == "the key, not the method"


def test_at_falls_back_to_an_attribute_of_a_mapping() -> None:
    class Named(dict[str, int]):
        label = "named mapping"

    state = State().with_meta(box=Named(a=1))
    assert render("{box@a} {box@label}", state=state) == "1 named mapping"


def test_at_reads_dataclass_fields_and_plain_object_attributes() -> None:
    state = State().with_meta(draft=Draft("draft text"), thing=Plain())
    assert render("{draft@text} / {thing@label}", state=state) == "draft text / plain label"


def test_hash_indexes_sequences_with_negative_indexes() -> None:
    assert render("{plan@sections#0@title} {plan@sections#-1@title} {plan@sections#-3@words}") == "Intro Sun 150"


def test_hash_on_a_mapping_looks_up_the_key() -> None:
    state = State().with_meta(table={0: "zero", -1: "minus one"})
    assert render("{table#0} {table#-1}", state=state) == "zero minus one"


def test_hash_dollar_indexes_a_sequence_with_an_int_root_value() -> None:
    assert render("{plan@sections#$current@title}") == "Moon"


def test_hash_dollar_indexes_a_mapping_with_a_str_root_value() -> None:
    assert render("{plan@by_name#$section_key@words}") == "150"


def test_hash_dollar_reads_its_index_from_render_values_first() -> None:
    assert render("{plan@sections#$current@title}", current=-1) == "Sun"


def test_segments_chain_through_nested_objects() -> None:
    nested = {"a": ({"b": Section("deep", 1)},)}
    state = State().with_meta(root=nested, i=0)
    assert render("{root@a#$i@b@title}", state=state) == "deep"


def test_a_key_segment_may_start_with_a_digit() -> None:
    state = State().with_meta(years={"2024": "leap"})
    assert render("{years@2024}", state=state) == "leap"


def test_state_path_reads_a_value_on_its_own() -> None:
    path = StatePath.parse("plan@sections#$current")
    assert path.read(base()) == PLAN.sections[1]
    assert path.read(base(), {"current": 0}) == PLAN.sections[0]
    assert path.root == "plan" and path.roots == ("plan", "current") and path.index_roots == ("current",)
    assert StatePath.parse("a#$a#$b#$a").roots == ("a", "b")
    assert path == StatePath.parse("plan@sections#$current") and repr(path) == "StatePath('plan@sections#$current')"


def test_state_path_parse_names_the_column_of_a_problem() -> None:
    with pytest.raises(TemplateError, match=r"path 'plan@@x', column 5: empty segment") as caught:
        StatePath.parse("plan@@x")
    assert caught.value.path == "plan@@x"


# -- roots -------------------------------------------------------------------------------------------------


def conversation() -> State:
    return (State()
            .append(Role.USER, Text("first question"))
            .append(Role.ASSISTANT, Text("first answer"))
            .append(Role.USER, Text("second question")))


def test_conversation_roots() -> None:
    state = conversation()
    assert render("{input}|{answer}|{turns#0@text}|{turns#-1@role}", state=state) == (
        "second question|first answer|first question|user")
    assert CONVERSATION_ROOTS == {"input", "answer", "turns", "outcome", "meta"}


def test_outcome_root_reads_the_last_answers_outcome() -> None:
    state = State().append(Role.USER, Text("q")).append(Role.ASSISTANT, Text("a")).degrade("cap reached")
    assert render("{outcome@status}: {outcome@reason}", state=state) == "degraded: cap reached"


def test_absent_conversation_values_render_as_nothing() -> None:
    assert render("[{input}][{answer}][{outcome}]", state=State()) == "[][][]"


def test_render_values_come_before_conversation_names_and_meta() -> None:
    state = base().with_meta(input="from meta")
    assert render("{topic} {input}", topic="given", input="given input", state=state) == "given given input"
    template = Template("{topic}")
    assert template.render(base(), {"topic": "mapping"}) == "mapping"
    assert template.render(base(), {"topic": "mapping"}, topic="keyword") == "keyword"


def test_conversation_names_come_before_meta_and_meta_reads_the_shadowed_key() -> None:
    state = base().with_meta(input="stored input", answer="stored answer")
    assert render("{input} / {meta@input} / {meta@answer}", state=state) == (
        "Write about tides / stored input / stored answer")


# -- aliases -------------------------------------------------------------------------------------------------


def test_bindings_name_a_path() -> None:
    template = Template("Section {title}: {word_limit} words", "word_limit=plan@sections#$current@words",
                        "title=plan@sections#$current@title")
    assert template.render(base()) == "Section Moon: 400 words"
    assert template.aliases == {"word_limit": "plan@sections#$current@words",
                                "title": "plan@sections#$current@title"}


def test_aliases_mapping_does_the_same_as_bindings() -> None:
    by_mapping = Template("{last}", aliases={"last": "plan@sections#-1@title"})
    by_binding = Template("{last}", "last=plan@sections#-1@title")
    assert by_mapping == by_binding and hash(by_mapping) == hash(by_binding)
    assert by_mapping.render(base()) == "Sun"


def test_a_bare_binding_declares_a_root_read() -> None:
    template = Template("About {topic}", "topic")
    assert template.render(base()) == "About tides" and template.aliases == {"topic": "topic"}


def test_an_alias_may_reuse_the_name_of_its_own_root() -> None:
    assert render("{plan}", "plan=plan@title") == "Tides"


def test_an_alias_may_shadow_a_conversation_name() -> None:
    assert render("{input}", "input=topic") == "tides"


def test_an_alias_starts_a_path_in_the_text() -> None:
    template = Template("{section@title}: {section@words} words ({section})", "section=plan@sections#$current")
    assert template.render(base()) == 'Moon: 400 words ({"title": "Moon", "words": 400, "notes": "cite sources"})'
    assert template.names == ("section@title", "section@words", "section")
    assert template.paths == ("plan@sections#$current@title", "plan@sections#$current@words",
                              "plan@sections#$current")
    assert template.roots == ("plan", "current")


def test_an_alias_shadows_a_root_of_the_same_name_in_the_text() -> None:
    assert render("{plan@intro@title}", "plan=plan@by_name") == "Intro"
    assert render("{topic#0}", "topic=plan@sections") == '{"title": "Intro", "words": 150, "notes": null}'


def test_names_paths_and_roots() -> None:
    template = Template("{input} {limit} {plan@title} {limit} {again} {{literal}}",
                        "limit=plan@sections#$current@words", "again=plan@sections#$current@words")
    assert template.names == ("input", "limit", "plan@title", "again")
    assert template.paths == ("input", "plan@sections#$current@words", "plan@title")
    assert template.roots == ("input", "plan", "current")
    assert template.text.endswith("{{literal}}")


def test_a_template_without_placeholders() -> None:
    template = Template("Just text.")
    assert template.render(State()) == "Just text."
    assert template.names == template.paths == template.roots == ()


def test_repr_shows_text_and_bindings() -> None:
    assert repr(Template("{a}", "a=b@c")) == "Template('{a}', 'a=b@c')"


# -- braces --------------------------------------------------------------------------------------------------


def test_doubled_braces_are_literal() -> None:
    assert render('JSON: {{"topic": "{topic}"}} {{}} }}{{') == 'JSON: {"topic": "tides"} {} }{'


def test_a_placeholder_next_to_escaped_braces() -> None:
    assert render("{{{topic}}}") == "{tides}"


def test_a_placeholder_used_twice_is_filled_twice() -> None:
    assert render("{topic}, {topic}!") == "tides, tides!"


def test_multiline_text_keeps_its_layout() -> None:
    assert render("Topic:\n  {topic}\n") == "Topic:\n  tides\n"


# -- showing values -----------------------------------------------------------------------------------------


class Colour(enum.Enum):
    RED = "red"


def test_scalars_show_with_str() -> None:
    state = State().with_meta(n=3, x=0.5, yes=True, role=Role.USER, colour=Colour.RED)
    assert render("{n} {x} {yes} {role} {colour}", state=state) == "3 0.5 True user red"


def test_none_shows_as_nothing() -> None:
    assert render("[{plan@sections#0@notes}]") == "[]"


def test_containers_show_as_one_line_of_json() -> None:
    state = State().with_meta(data={"list": [1, "two", None, True], "tuple": ("x",), "nested": {"k": 1.5}})
    assert render("{data}", state=state) == (
        '{"list": [1, "two", null, true], "tuple": ["x"], "nested": {"k": 1.5}}')
    assert render("{outline@parts}") == '["a", "b", "c"]'


def test_records_show_as_json_objects_without_private_fields() -> None:
    assert render("{plan@sections#1}") == '{"title": "Moon", "words": 400, "notes": "cite sources"}'
    assert show(Draft("d")) == '{"text": "d"}'


def test_show_handles_sets_named_tuples_enums_and_unicode() -> None:
    Point = namedtuple("Point", "x y")
    assert show(frozenset({3, 1, 2})) == "[1, 2, 3]"
    assert show(Point(1, 2)) == '{"x": 1, "y": 2}'
    assert show({Colour.RED: Colour.RED, 1: "é"}) == '{"red": "red", "1": "é"}'
    assert show({"turn": Text("hi")}) == '{"turn": {"text": "hi"}}'


def test_show_uses_a_records_own_str_and_survives_a_cycle() -> None:
    @attrs.frozen
    class Titled:
        title: str

        def __str__(self) -> str:
            return f"<{self.title}>"

    assert show(Titled("t")) == "<t>"
    loop: list[Any] = [1]
    loop.append(loop)
    assert show(loop) == '[1, "..."]'
    assert show(Plain()).startswith("<")


# -- construction errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ("Hello {", r"line 1, column 7: '\{' is never closed"),
    ("a }", r"line 1, column 3: single '\}'"),
    ("{a {b}}", r"line 1, column 1: this '\{' opens a placeholder that holds another '\{'"),
    ("x {}", r"line 1, column 3: empty placeholder '\{\}'"),
    ("one\ntwo {plan@@x}", r"line 2, column 10: in placeholder '\{plan@@x\}': empty segment"),
    ("{plan@}", r"column 6: in placeholder '\{plan@\}': empty segment: '@' must be followed by a key"),
    ("{@plan}", r"column 2: .*the path's root name is missing"),
    ("{plan#}", r"column 6: .*empty segment: '#' must be followed by an integer or '\$name'"),
    ("{plan#x}", r"column 7: .*'#' must be followed by an integer or '\$name', got 'x'"),
    ("{plan#3x}", r"column 7: .*got '3x'"),
    ("{plan#-}", r"column 7: .*got '-'"),
    ("{plan#$}", r"column 8: .*the name after '#\$' is missing"),
    ("{plan#$1}", r"column 8: .*the name after '#\$' must start with a letter or '_', got '1'"),
    ("{1plan}", r"column 2: .*root name must start with a letter or '_', got '1plan'"),
    ("{plan.title}", r"column 6: .*'\.' is not part of the path language; read a key or attribute with '@'"),
    ("{plan[0]}", r"column 6: .*index with '#'"),
    ("{plan$x}", r"column 6: .*'\$' only follows '#'"),
    ("{ plan }", r"column 2: .*a path holds no spaces"),
    ("{n:>4}", r"column 3: .*format specs"),
    ("{n!r}", r"column 3: .*conversions"),
    ("{a=b}", r"column 3: .*'=' names an alias"),
])
def test_malformed_text_is_refused_when_built(text: str, message: str) -> None:
    with pytest.raises(TemplateError, match=f"^template text, .*{message}"):
        Template(text)


def test_construction_errors_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        Template("{")
    assert issubclass(TemplateError, UsageError)


@pytest.mark.parametrize(("bindings", "message"), [
    (("limit=a", "limit=b"), (r"binding 'limit=b' \(argument 3\): the alias 'limit' is already bound, by "
                              r"template binding 'limit=a' \(argument 2\)")),
    (("limit=plan#x",), r"binding 'limit=plan#x' \(argument 2\), column 12: '#' must be followed by an integer"),
    (("limit=",), r"binding 'limit=' \(argument 2\), column 7: the path is empty"),
    (("=plan",), r"column 1: the alias name before '=' is missing"),
    (("2x=plan",), r"column 1: the alias name '2x' must be an identifier"),
    (("plan@title",), r"a binding without '=' is a plain name .* 'name=plan@title'"),
    (("plan@@title",), r"binding 'plan@@title' \(argument 2\), column 5: empty segment"),
    (("unused=plan",), (r"binding 'unused=plan' \(argument 2\): no placeholder in the template text uses it "
                        r"\(as '\{unused\}' or as the start of a path\)")),
])
def test_bad_bindings_are_refused_when_built(bindings: tuple[str, ...], message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        Template("{limit}", *bindings)


def test_an_alias_given_both_ways_is_a_duplicate() -> None:
    with pytest.raises(TemplateError, match=r"alias 'limit': the alias 'limit' is already bound, by template "
                                            r"binding 'limit=a'"):
        Template("{limit}", "limit=a", aliases={"limit": "b"})


def test_bad_aliases_mapping() -> None:
    with pytest.raises(TemplateError, match=r"alias 'limit' = 'plan#', column 5: empty segment"):
        Template("{limit}", aliases={"limit": "plan#"})
    with pytest.raises(TemplateError, match="must be an identifier"):
        Template("{limit}", aliases={"no good": "plan"})
    with pytest.raises(TemplateError, match="a path is a str"):
        Template("{limit}", aliases={"limit": 3})  # type: ignore[dict-item]
    with pytest.raises(TemplateError, match="mapping of name to path"):
        Template("{limit}", aliases=["limit=plan"])  # type: ignore[arg-type]


def test_an_alias_cannot_follow_hash_dollar() -> None:
    with pytest.raises(TemplateError, match=r"line 1, column 6: in placeholder '\{plan#\$i\}', '#\$i' reads the "
                                            r"root value 'i', but 'i' is an alias in this template"):
        Template("{i} {plan#$i}", "i=current")
    with pytest.raises(TemplateError, match=r"'#\$i' reads the root value 'i', but 'i' is an alias"):
        Template("{i@x#$i}", "i=current")


def test_text_and_bindings_must_be_strings() -> None:
    with pytest.raises(TemplateError, match="text is a str"):
        Template(b"{a}")  # type: ignore[arg-type]
    with pytest.raises(TemplateError, match=r"argument 2\): a binding is a str"):
        Template("{a}", 1)  # type: ignore[arg-type]


# -- rendering errors ---------------------------------------------------------------------------------------


def failure(text: str, *bindings: str, state: State | None = None, **values: Any) -> TemplateError:
    with pytest.raises(TemplateError) as caught:
        render(text, *bindings, state=state, **values)
    return caught.value


def test_an_index_out_of_range_names_the_path_and_where_it_stopped() -> None:
    error = failure("{plan@sections#3@title}")
    assert str(error) == "template path 'plan@sections#3@title': 'plan@sections' has 3 items, index 3 is out of range"
    assert error.path == "plan@sections#3@title"
    assert "has 3 items, index -4 is out of range" in str(failure("{plan@sections#-4}"))


def test_an_alias_failure_names_the_aliased_path() -> None:
    error = failure("{limit}", "limit=plan@sections#$current@wordz", current=2)
    assert str(error) == ("template path 'plan@sections#$current@wordz': 'plan@sections#$current' has no key or "
                          "attribute 'wordz' (a Section)")


def test_a_missing_key_lists_the_mappings_keys() -> None:
    assert str(failure("{outline@partz}")) == (
        "template path 'outline@partz': 'outline' has no key or attribute 'partz' (it is a mapping with keys "
        "'parts', 'meta-data')")
    assert "'outline' has no key 0 (it is a mapping with keys 'parts', 'meta-data')" in str(failure("{outline#0}"))


def test_a_missing_root_lists_where_names_are_looked_up() -> None:
    message = str(failure("{plna@title}", extra=1))
    assert message.startswith("template path 'plna@title': no value named 'plna' (values given: 'extra'; keys of "
                              "state.meta: 'plan', 'current', ")
    assert "conversation names: answer, input, meta, outcome, turns" in message
    assert "keys of state.meta: none" in str(failure("{x}", state=State()))


def test_a_missing_index_root_is_named() -> None:
    message = str(failure("{plan@sections#$nowhere}"))
    assert "no value named 'nowhere'" in message and message.endswith("(for '#$nowhere')")


def test_an_index_of_the_wrong_type() -> None:
    assert str(failure("{plan@sections#$section_key}")) == (
        "template path 'plan@sections#$section_key': 'plan@sections' is a sequence, so its index must be an int; "
        "index 'intro' (the value of 'section_key') is a str")
    assert "'#$flag' indexes with 'flag', which must be an int or a str; it is a bool" in str(
        failure("{plan@sections#$flag}", flag=True))


def test_reading_through_none_says_so() -> None:
    assert "'plan@sections#0@notes' is None, so it has no key or attribute 'x'" in str(
        failure("{plan@sections#0@notes@x}"))
    assert "'answer' is None, so it cannot be indexed" in str(failure("{answer#0}"))


def test_indexing_something_that_is_not_indexable() -> None:
    assert "'topic' is a str, which '#' cannot index" in str(failure("{topic#0}"))
    assert "'plan' is a Plan, which '#' cannot index" in str(failure("{plan#0}"))


def test_a_sequence_has_no_attributes_to_read() -> None:
    assert "(it is a sequence of 3 items; index it with '#', as in 'plan@sections#0')" in str(
        failure("{plan@sections@title}"))


def test_methods_and_private_attributes_are_not_read() -> None:
    state = State().with_meta(thing=Plain(), draft=Draft("d"))
    assert "'thing' has no key or attribute 'method'" in str(failure("{thing@method}", state=state))
    assert "attributes starting with '_' are not read" in str(failure("{thing@_private}", state=state))
    assert "no key or attribute '_secret'" in str(failure("{draft@_secret}", state=state))
    assert render("{box@_k}", state=State().with_meta(box={"_k": "keys may start with _"})) == "keys may start with _"


def test_a_failing_property_is_reported_with_its_path() -> None:
    error = failure("{thing@broken}", state=State().with_meta(thing=Plain()))
    assert str(error) == "template path 'thing@broken': reading 'broken' of 'thing' raised ValueError: cannot compute"
    assert isinstance(error.__cause__, ValueError)


def test_render_checks_its_arguments() -> None:
    template = Template("{topic}")
    with pytest.raises(TemplateError, match="takes a loop.State"):
        template.render({"topic": "x"})  # type: ignore[arg-type]
    with pytest.raises(TemplateError, match="values are a mapping"):
        template.render(base(), [("topic", "x")])  # type: ignore[arg-type]


# -- a real conversation -------------------------------------------------------------------------------------


def test_rendering_a_system_prompt_from_a_conversation_and_earlier_stage_outputs() -> None:
    state = (State()
             .append(Role.USER, Text("Explain ocean tides for children"))
             .with_meta(research={"facts": ("The Moon pulls the sea.", "There are two tides a day.")},
                        plan={"sections": ({"title": "Moon", "words": 120}, {"title": "Daily", "words": 80})},
                        step=1, audience="children"))
    template = Template(
        "You write for {audience}.\n"
        "Request: {input}\n"
        "Write the section '{section@title}' in at most {limit} words.\n"
        "Use this fact: {research@facts#$step}\n"
        "Reply as {{\"text\": ...}}.",
        "limit=plan@sections#$step@words",
        aliases={"section": "plan@sections#$step"},
    )
    assert template.roots == ("audience", "input", "plan", "step", "research")
    assert template.render(state) == (
        "You write for children.\n"
        "Request: Explain ocean tides for children\n"
        "Write the section 'Daily' in at most 80 words.\n"
        "Use this fact: There are two tides a day.\n"
        'Reply as {"text": ...}.')
    prompted = state.append(Role.SYSTEM, Text(template.render(state, step=0)))
    assert prompted.last is not None and "'Moon' in at most 120 words" in prompted.last.text
