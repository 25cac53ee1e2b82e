"""An output type matches its schema's regular expressions in linear time (RE2): a pattern built to backtrack
(``^(a+)+$``) against a text built to make it (``aaa…a!``) is answered at once, wherever JSON Schema evaluates a
pattern (``pattern``, ``patternProperties``, and the properties ``additionalProperties`` and
``unevaluatedProperties`` leave over); a pattern RE2 cannot compile still works, through ``re``, and is named by
``OutputType.backtracking``."""

from __future__ import annotations

import time
from typing import Any

import jsonschema
import pytest

from loop import OutputType

EVIL = "a" * 25 + "!"  # about 4 s for Python's backtracking `re` against ^(a+)+$; twice as long per extra "a"
BACKTRACKS = "^(a+)+$"

CASES = {
    "pattern": ({"type": "string", "pattern": BACKTRACKS}, EVIL, "does not match '^(a+)+$'"),
    "nested pattern": ({"type": "object", "properties": {"x": {"$ref": "#/$defs/word"}},
                        "$defs": {"word": {"type": "string", "pattern": BACKTRACKS}}}, {"x": EVIL}, "does not match"),
    "patternProperties": ({"type": "object", "patternProperties": {BACKTRACKS: {"type": "string"}}},
                          {EVIL: 1, "a": 2}, "2 is not of type 'string'"),
    "additionalProperties": ({"type": "object", "patternProperties": {BACKTRACKS: {}}, "additionalProperties": False},
                             {EVIL: 1}, "does not match any of the regexes: '^(a+)+$'"),
    "additionalProperties schema": ({"type": "object", "patternProperties": {BACKTRACKS: {}},
                                     "additionalProperties": {"type": "string"}}, {EVIL: 1}, "1 is not of type"),
    "unevaluatedProperties": ({"type": "object", "patternProperties": {BACKTRACKS: {}}, "unevaluatedProperties": False},
                              {EVIL: 1}, "Unevaluated properties are not allowed ('aaaaaaaaaaaaaaaaaaaaaaaaa!' was "
                                         "unexpected)"),
    "unevaluatedProperties through allOf": (
        {"type": "object", "allOf": [{"patternProperties": {BACKTRACKS: {}}}], "unevaluatedProperties": False},
        {EVIL: 1}, "Unevaluated properties are not allowed"),
    "propertyNames": ({"type": "object", "propertyNames": {"pattern": BACKTRACKS}}, {EVIL: 1}, "does not match"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_backtracking_pattern_is_checked_in_linear_time(case: str) -> None:
    schema, value, words = CASES[case]
    output = OutputType.of(schema)
    started = time.perf_counter()
    problems = output.errors(value)
    took = time.perf_counter() - started
    assert took < 1.0, f"{took:.3f} s"  # a backtracking match of EVIL would take minutes: the bound is generous
    assert len(problems) == 1 and words in problems[0], problems
    assert output.backtracking == ()


def test_extract_reads_past_spans_that_miss_a_backtracking_pattern_at_once() -> None:
    output = OutputType.of({"type": "object", "properties": {"k": {"type": "string", "pattern": BACKTRACKS}},
                            "required": ["k"]})
    text = " ".join(f'try {{"k": "{EVIL}"}}' for _ in range(20)) + ' so: {"k": "aaa"} and {"j": 1}'
    started = time.perf_counter()
    assert output.extract(text) == {"k": "aaa"}  # the last span that validates
    assert time.perf_counter() - started < 0.1


@pytest.mark.parametrize(("pattern", "text", "matches"), [
    ("^[a-z]+-\\d+$", "ab-12", True),
    ("^[a-z]+-\\d+$", "ab-", False),
    ("b", "abc", True),  # a search, as JSON Schema says: not anchored
    ("^a$", "a\n", False),  # ECMA's $ is the end, not before a last newline as in Python
    ("^\\d$", "\u0663", False),  # ECMA's \d is 0-9 only
    ("^[\\u4e00-\\u9fa5]+$", "中文", True),  # ECMA's \uXXXX
    ("^\\\\u0041$", "\\u0041", True),  # an escaped backslash, then a plain "u0041"
    ("^.$", "\ud800", True),  # a lone surrogate is one character, and no error
    ("(?i)^abc$", "ABC", True),
])
def test_patterns_match_as_json_schema_says(pattern: str, text: str, matches: bool) -> None:
    output = OutputType.of({"type": "string", "pattern": pattern})
    assert (output.errors(text) == []) is matches
    assert output.backtracking == ()


@pytest.mark.parametrize(("schema", "value", "valid", "named"), [
    ({"type": "string", "pattern": "^(?=a)a+$"}, "aa", True, "'^(?=a)a+$'"),
    ({"type": "string", "pattern": "^(?=a)a+$"}, "ba", False, "'^(?=a)a+$'"),
    ({"type": "object", "patternProperties": {"^(a)\\1$": {"type": "integer"}}}, {"aa": "x"}, False, "'^(a)\\\\1$'"),
    ({"type": "string", "pattern": "\\Z"}, "x", True, "'\\\\Z'"),
])
def test_a_pattern_re2_cannot_compile_still_works_and_is_named(schema: dict[str, Any], value: Any, valid: bool,
                                                               named: str) -> None:
    output = OutputType.of(schema)
    assert (output.errors(value) == []) is valid
    assert len(output.backtracking) == 1
    assert named in output.backtracking[0] and "RE2 cannot compile" in output.backtracking[0]


def test_a_dialect_named_below_the_root_is_named() -> None:
    output = OutputType.of({"type": "object", "properties": {"x": {
        "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string"}}})
    assert len(output.backtracking) == 1 and "'$schema' below the root" in output.backtracking[0]
    assert OutputType.of({"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"}).backtracking == ()


@pytest.mark.parametrize("schema", [
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "string", "pattern": BACKTRACKS},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "string", "pattern": BACKTRACKS},
    {"$schema": "https://json-schema.org/draft/2019-09/schema", "type": "object",
     "patternProperties": {BACKTRACKS: {}}, "unevaluatedProperties": False},
])
def test_every_dialect_matches_in_linear_time(schema: dict[str, Any]) -> None:
    value = EVIL if schema["type"] == "string" else {EVIL: 1}
    started = time.perf_counter()
    assert OutputType.of(schema).errors(value)
    assert time.perf_counter() - started < 0.1


UNEVALUATED = {
    "type": "object", "properties": {"a": {}}, "patternProperties": {"^p": {}},
    "allOf": [{"properties": {"b": {}}}], "anyOf": [{"properties": {"c": {"type": "string"}}}, {"required": ["z"]}],
    "if": {"required": ["d"]}, "then": {"properties": {"d": {}, "e": {}}}, "else": {"properties": {"f": {}}},
    "dependentSchemas": {"g": {"properties": {"g": {}, "h": {}}}}, "$defs": {"i": {"properties": {"i": {}}}},
    "$ref": "#/$defs/i", "unevaluatedProperties": False}


@pytest.mark.parametrize(("schema", "value"), [
    (UNEVALUATED, {"a": 1, "p1": 1, "b": 1, "c": "x", "d": 1, "e": 1, "g": 1, "h": 1, "i": 1}),
    (UNEVALUATED, {"f": 1}),
    (UNEVALUATED, {"a": 1, "x": 1, "e": 1, "h": 1, "c": 2}),
    ({"type": "object", "unevaluatedProperties": {"type": "integer"}}, {"n": 1}),
    ({"type": "object", "unevaluatedProperties": {"type": "integer"}}, {"n": "x", "m": None}),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     {"a": "x", "b": 1, "c": "y"}),
    ({"type": "object", "properties": {"a": {}}, "additionalProperties": False}, {"a": 1, "b": 1, "c": 2}),
])
def test_the_keywords_keep_jsonschemas_meaning_and_words(schema: dict[str, Any], value: Any) -> None:
    stock = jsonschema.Draft202012Validator(schema)
    expected = sorted(f"{'$' + ''.join(f'.{p}' for p in e.absolute_path)}: {e.message}"
                      for e in stock.iter_errors(value))
    assert sorted(OutputType.of(schema).errors(value)) == expected
