"""The shared limited JSON reader (:mod:`needlebench.safe_json`): each limit, the field path of a refused value,
the two policies for an integer with too many digits, and nesting far past the recursion limit."""

from __future__ import annotations

import ast
import json
import math
import sys

import pytest

from needlebench import safe_json
from needlebench.safe_json import JSONLimitError, Limits, dotted_path, indexed_path, loads

STRICT = Limits(max_depth=4, max_int_digits=5, max_number_chars=8, finite_only=True, lone_surrogates=False)
LOOSE = Limits(max_depth=4, max_int_digits=5, over_digits="infinite", finite_only=False)


def refused(text: str | bytes, limits: Limits = STRICT) -> JSONLimitError:
    with pytest.raises(JSONLimitError) as caught:
        loads(text, limits)
    return caught.value


def test_values_within_the_limits_read_as_json_loads_reads_them():
    text = '{"a": [1, -12345, 1.5e3, "x\\u00e9", null, true, {"b": []}], "c": "\\ud83d\\ude00"}'
    assert loads(text, STRICT) == json.loads(text)
    assert loads(text.encode("utf-8"), STRICT) == json.loads(text)


def test_a_syntax_error_is_json_s_own_and_wins_over_a_value_beyond_a_limit():
    with pytest.raises(json.JSONDecodeError) as caught:
        loads('{"a": NaN, "b": }', STRICT)
    assert caught.value.msg == "Expecting value"


@pytest.mark.parametrize(
    ("text", "kind", "path", "literal"),
    [
        ('{"configs": {"atc_en": {"rows": 123456}}}', safe_json.DIGITS, ("configs", "atc_en", "rows"), "123456"),
        ("[0, -123456]", safe_json.DIGITS, (1,), "-123456"),
        ('{"x": [1.2345678]}', safe_json.CHARS, ("x", 0), "1.2345678"),
        ('{"x": 1e999}', safe_json.RANGE, ("x",), "1e999"),
        ('{"x": -1e999}', safe_json.RANGE, ("x",), "-1e999"),
        ('[{"doc": {"q": NaN}}]', safe_json.CONSTANT, (0, "doc", "q"), "NaN"),
        ('{"a": Infinity}', safe_json.CONSTANT, ("a",), "Infinity"),
        ('{"a": -Infinity}', safe_json.CONSTANT, ("a",), "-Infinity"),
        ('[3, {"doc": {"question": "\\ud800"}}]', safe_json.SURROGATE, (1, "doc", "question"), ""),
        ('{"doc": {"\\udc00": 1}}', safe_json.SURROGATE_KEY, ("doc",), ""),
    ],
)
def test_each_limit_names_the_field_and_the_reason(text, kind, path, literal):
    error = refused(text)
    assert (error.kind, error.path, error.literal) == (kind, path, literal)
    assert isinstance(error, ValueError)


def test_each_limit_can_be_lifted():
    assert loads("[NaN, Infinity, 1e999]", LOOSE)[1:] == [math.inf, math.inf]
    assert loads('"\\ud800"', LOOSE) == "\ud800"
    assert loads("1.23456789012", Limits(max_depth=4)) == 1.23456789012
    assert loads("1" * 50, Limits(max_depth=4)) == int("1" * 50)


def test_digits_count_without_the_sign_and_chars_count_with_it():
    assert loads("-12345", STRICT) == -12345
    assert refused("-1234567", Limits(max_depth=4, max_number_chars=7)).kind == safe_json.CHARS
    assert loads("1234567", Limits(max_depth=4, max_number_chars=7)) == 1234567


def test_too_many_digits_refused_or_read_as_infinite():
    assert refused("[1234567]").kind == safe_json.DIGITS
    assert loads("[1234567, -1234567]", LOOSE) == [math.inf, -math.inf]
    assert loads("[" + "9" * 5000 + "]", LOOSE) == [math.inf]  # never Python's 4,300-digit ValueError
    with pytest.raises(ValueError):
        Limits(max_depth=4, over_digits="clip")  # type: ignore[arg-type]


def test_depth_counts_arrays_and_objects_from_the_top():
    assert loads("[[[[1]]]]", STRICT) == [[[[1]]]]
    error = refused('{"a": [[{"b": []}]]}')
    assert (error.kind, error.path) == (safe_json.DEPTH, ("a", 0, 0, "b"))
    assert loads(" 1 ", Limits(max_depth=0)) == 1
    assert refused("[]", Limits(max_depth=0)).path == ()


def test_the_first_value_found_is_the_last_child_first_as_before():
    """The walk pops the last child first: of two refused values the later one is named (the callers' messages
    have always named that one)."""
    assert refused('{"a": NaN, "b": Infinity}').path == ("b",)


@pytest.mark.parametrize("depth", [sys.getrecursionlimit() * 3, 100_000])
def test_nesting_far_past_the_recursion_limit_is_a_limit_error(depth):
    for text in ("[" * depth + "]" * depth, '{"a": ' * depth + "1" + "}" * depth):
        error = refused(text, LOOSE)  # never a RecursionError
        assert (error.kind, error.path) == (safe_json.RECURSION, ())


def test_nesting_within_the_recursion_limit_names_the_field():
    error = refused('{"x": ' + "[" * 200 + "]" * 200 + "}")
    assert error.kind == safe_json.DEPTH and error.path == ("x", 0, 0, 0)


def test_field_paths_spelled_both_ways():
    path = ("configs", "atc_en", "rows")
    assert dotted_path(path) == "configs.atc_en.rows"
    assert indexed_path(path) == "configs.atc_en.rows"
    assert indexed_path((3, "doc", "question")) == "[3].doc.question"
    assert dotted_path((3, "doc")) == "3.doc"
    assert dotted_path(()) == "(top level)" and indexed_path(()) == "the value"
    assert indexed_path(("a b", "\x1b[2J" * 40)) == "['a b']['" + "\\x1b[2J" * 15 + "']"
    assert len(dotted_path(("k" * 200,))) == 120 and dotted_path(("k" * 200,)).endswith("...")


def test_the_message_is_the_caller_s_or_a_plain_default():
    error = refused('{"x": NaN}')
    assert str(error) == "x: constant (NaN)"
    assert str(JSONLimitError(safe_json.DEPTH, ("x",), message="nested deeper than 4 levels")) == (
        "nested deeper than 4 levels"
    )


def test_the_module_imports_only_the_standard_library_and_errors():
    source = safe_json.__file__
    with open(source, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert all(name in sys.stdlib_module_names or name == "__future__" for name in modules - {"needlebench.errors"})
