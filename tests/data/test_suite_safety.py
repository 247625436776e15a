"""Hostile and nonsensical suite files, unknown keys included.

Each hostile file goes through the CLI: exit 2, one `llmscope: error:` line
naming the file (and line/field where there is one), no traceback, nothing in the database.
The semantic checks are asserted on `SuiteError.path/line/field`, computed from what the
test wrote.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import duckdb
import pytest

from llmscope.data.suites import SuiteError, load_suite, render
from tests.helpers.cli import assert_clean_error, cli, cli_env

ALIAS_BOMB = """name: bomb
task: yesno
items: items.jsonl
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
description: *i
"""


def _suite(
    tmp: Path, spec: str, items: str | bytes | None = '{"id": 1, "text": "t", "gold": "yes"}\n'
) -> Path:
    (tmp / "suite.yaml").write_text(spec)
    if items is not None:
        p = tmp / "items.jsonl"
        p.write_bytes(items if isinstance(items, bytes) else items.encode())
    return tmp / "suite.yaml"


SPEC = "name: s\ntask: yesno\nitems: items.jsonl\n"


def _run_cli(tmp: Path, suite: Path) -> tuple[str, Path]:
    db = tmp / "x.duckdb"
    t0 = time.monotonic()
    proc = cli(
        "run",
        "--suite",
        str(suite),
        "--db",
        str(db),
        "--model",
        "openai:m",
        "--base-url",
        "http://127.0.0.1:9/v1",
        env=cli_env(OPENAI_API_KEY="sk-x"),
        timeout=120,
    )
    assert time.monotonic() - t0 < 120
    err = assert_clean_error(proc)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr  # one line, whatever the input
    if db.exists():
        con = duckdb.connect(str(db), read_only=True)
        n = con.execute(
            "SELECT (SELECT count(*) FROM suites) + (SELECT count(*) FROM items) "
            "+ (SELECT count(*) FROM runs) + (SELECT count(*) FROM results)"
        ).fetchone()
        con.close()
        assert n == (0,)
    return err, db


def test_alias_bomb_is_refused(tmp_path: Path) -> None:
    err, _ = _run_cli(tmp_path, _suite(tmp_path, ALIAS_BOMB))
    assert "suite.yaml, line 5" in err and "aliases (*a) are not allowed" in err


def test_deep_json_is_refused(tmp_path: Path) -> None:
    deep = '{"id": 1, "text": "t", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    err, _ = _run_cli(tmp_path, _suite(tmp_path, SPEC, '{"id": 0, "text": "ok"}\n' + deep))
    assert "items.jsonl, line 2" in err and "nested too deeply" in err


def test_huge_integer_id_is_refused(tmp_path: Path) -> None:
    items = '{"id": ' + "7" * 5000 + ', "text": "t"}\n'
    err, _ = _run_cli(tmp_path, _suite(tmp_path, SPEC, items))
    assert "items.jsonl, line 1" in err and "5000 digits" in err and "64 bits" in err


@pytest.mark.skipif(os.name != "posix", reason="symlinks and FIFOs are POSIX")
def test_items_symlink_loop_is_refused(tmp_path: Path) -> None:
    suite = _suite(tmp_path, SPEC, None)
    os.symlink(tmp_path / "items.jsonl", tmp_path / "items.jsonl")
    err, _ = _run_cli(tmp_path, suite)
    assert "field 'items'" in err and "symlink loop" in err


@pytest.mark.skipif(os.name != "posix", reason="symlinks and FIFOs are POSIX")
def test_fifo_and_device_are_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "items.jsonl")
    suite = _suite(tmp_path, SPEC, None)
    with pytest.raises(SuiteError) as ei:
        load_suite(suite).items()  # would block forever on open() without the check
    assert ei.value.field == "items" and "not a regular file" in str(ei.value)
    os.symlink("/dev/zero", tmp_path / "zero.jsonl")
    (tmp_path / "suite.yaml").write_text("name: s\ntask: yesno\nitems: zero.jsonl\n")
    with pytest.raises(SuiteError, match="not a regular file"):
        load_suite(suite)
    # a spec that is a FIFO: refused, not read
    os.mkfifo(tmp_path / "fifo.yaml")
    with pytest.raises(SuiteError, match="not a regular file"):
        load_suite(tmp_path / "fifo.yaml")


def test_template_attribute_access_is_refused(tmp_path: Path) -> None:
    spec = SPEC + "templates:\n  q: '{text.__class__.__mro__}'\n"
    err, _ = _run_cli(tmp_path, _suite(tmp_path, spec))
    assert "suite.yaml, line 4, field 'templates'" in err and "attribute access" in err


def test_template_huge_width_is_refused(tmp_path: Path) -> None:
    spec = SPEC + "templates:\n  q: '{text:>50000000}'\n"
    err, _ = _run_cli(tmp_path, _suite(tmp_path, spec))
    assert "field 'templates'" in err and "width over 200" in err


@pytest.mark.parametrize(
    "tpl", ["{text[0]}", "{text.upper}", "{text:{n}}", "{0}", "{}", "{text!x}"]
)
def test_restricted_formatter_rejects(tmp_path: Path, tpl: str) -> None:
    with pytest.raises(SuiteError) as ei:
        load_suite(_suite(tmp_path, SPEC + f"templates: '{tpl}'\n"))
    assert ei.value.field == "templates"


def test_restricted_formatter_renders_plain_fields() -> None:
    # what str.format gives for the same safe template (independent reference)
    fields = {"a": "x", "n": 3.14159, "b": None, "c": "{d}"}
    tpl = "<{a}> {n:.2f} [{a:>4}] {b}{c} {a!r}"
    assert render(tpl, fields) == "<x> 3.14 [   x] {d} 'x'"
    assert render(tpl, fields) == tpl.format(**{**fields, "b": ""})


def test_oversize_spec_is_refused(tmp_path: Path) -> None:
    spec = SPEC + "description: '" + "x" * (1 << 20) + "'\n"
    with pytest.raises(SuiteError, match="limit is 1,048,576"):
        load_suite(_suite(tmp_path, spec))


@pytest.mark.parametrize(
    "key,value,hint",
    [
        ("answer", "[yes, no]", "did you mean 'answers'?"),
        ("group_bye", "[a]", "did you mean 'group_by'?"),
    ],
)
def test_unknown_spec_key_names_key_and_allowed(
    tmp_path: Path, key: str, value: str, hint: str
) -> None:
    with pytest.raises(SuiteError) as ei:
        load_suite(_suite(tmp_path, SPEC + f"{key}: {value}\n"))
    e = ei.value
    assert (e.line, e.field) == (4, key)
    assert hint in e.message and "allowed keys: name, task" in e.message


@pytest.mark.parametrize(
    "answers,needle",
    [
        ("['yes', '  ']", "must not be empty"),
        ("[yes, yes]", "'yes' appears twice"),
        ("[yes]", "at least two"),
    ],
)
def test_bad_answer_labels(tmp_path: Path, answers: str, needle: str) -> None:
    with pytest.raises(SuiteError) as ei:
        load_suite(_suite(tmp_path, SPEC + f"answers: {answers}\n"))
    assert (ei.value.line, ei.value.field) == (4, "answers") and needle in ei.value.message


def _items_error(tmp: Path, spec: str, records: list[dict[str, object]]) -> SuiteError:
    items = "".join(json.dumps(r) + "\n" for r in records)
    with pytest.raises(SuiteError) as ei:
        load_suite(_suite(tmp, spec, items)).items()
    assert ei.value.path == str((tmp / "items.jsonl").resolve())
    return ei.value


def test_yesno_gold_must_be_an_answer(tmp_path: Path) -> None:
    e = _items_error(
        tmp_path,
        SPEC,
        [{"id": 1, "text": "a", "gold": "Yes "}, {"id": 2, "text": "b", "gold": "maybe"}],
    )
    assert (e.line, e.field) == (2, "gold") and "'maybe'" in e.message


def test_variant_gold_field_is_checked_too(tmp_path: Path) -> None:
    spec = SPEC + "templates: {a: '{text}', b: '{text}'}\nvariant_gold: {b: gold_b}\n"
    e = _items_error(tmp_path, spec, [{"id": 1, "text": "a", "gold": "yes", "gold_b": "perhaps"}])
    assert (e.line, e.field) == (1, "gold_b")


RATING = "name: r\ntask: rating\nitems: items.jsonl\nanswers: ['1', '2', '3', '4', '5']\n"


@pytest.mark.parametrize(
    "gold,ok",
    [
        ("3", True),
        (2.5, True),
        (5, True),
        ("9", False),
        (0.5, False),
        ("high", False),
        ("inf", False),
        ("nan", False),
    ],
)
def test_rating_gold_on_the_scale_and_finite(tmp_path: Path, gold: object, ok: bool) -> None:
    recs = [{"id": 1, "text": "a", "gold": "1"}, {"id": 2, "text": "b", "gold": gold}]
    if ok:
        items = "".join(json.dumps(r) + "\n" for r in recs)
        assert len(load_suite(_suite(tmp_path, RATING, items)).items()) == 2
    else:
        e = _items_error(tmp_path, RATING, recs)
        assert (e.line, e.field) == (2, "gold")


CHOICE = "name: c\ntask: choice\nitems: items.jsonl\n"


@pytest.mark.parametrize(
    "options,gold,field,needle",
    [
        (["a", "b", "a"], "a", "options", "'a' appears twice"),
        (["a", " ", "c"], "a", "options", "must not be empty"),
        (["a", "b"], "c", "gold", "not one of the options"),
    ],
)
def test_choice_options_distinct_nonblank_gold_among(
    tmp_path: Path, options: list[str], gold: str, field: str, needle: str
) -> None:
    recs = [
        {"id": 1, "text": "q", "options": ["x", "y"], "gold": "y"},
        {"id": 2, "text": "q", "options": options, "gold": gold},
    ]
    e = _items_error(tmp_path, CHOICE, recs)
    assert (e.line, e.field) == (2, field)
    assert needle in e.message


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nonfinite_human_numbers_are_refused(tmp_path: Path, literal: str) -> None:
    items = (
        '{"id": 1, "text": "a", "human_q1": 0.5}\n{"id": 2, "text": "b", "human_q1": '
        + literal
        + "}\n"
    )
    with pytest.raises(SuiteError) as ei:
        load_suite(_suite(tmp_path, SPEC, items)).items()
    e = ei.value
    assert (e.line, e.field) == (2, "human_q1") and "NaN or Infinity" in e.message


def test_blank_gold_cell_is_no_gold(tmp_path: Path) -> None:
    (tmp_path / "items.csv").write_text("id,text,gold\n1,a,yes\n2,b,\n")
    (tmp_path / "suite.yaml").write_text("name: s\ntask: yesno\nitems: items.csv\n")
    assert [it.gold for it in load_suite(tmp_path / "suite.yaml").items()] == ["yes", None]


def test_every_builtin_suite_still_loads() -> None:
    for name in (
        "commonsense-sample",
        "mc-sample",
        "rating-sample",
        "generation-sample",
        "minimal-pairs",
    ):
        assert load_suite(name).work()


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("{text.__class__.__mro__}", "attribute access and indexing are not allowed"),
        ("{text:>999999999}", "width over 200"),
        ("{nosuch}", "'nosuch', which item '1' does not have"),
    ],
)
def test_reverse_template_is_checked_like_the_suite_templates(
    tmp_path: Path, template: str, needle: str
) -> None:
    """A rating suite's `reverse_templates` follow the same plain-field rule as its own
    templates, refused with one line naming the field (before: a ValueError or KeyError
    traceback), before any request."""
    (tmp_path / "items.jsonl").write_text('{"id": "1", "text": "a", "gold": "3"}\n')
    (tmp_path / "s.yaml").write_text(
        "name: rev\ntask: rating\nitems: items.jsonl\nanswers: ['1', '2', '3']\n"
        "templates:\n  a: '{text}'\ntask_options:\n"
        f"  reverse_templates: {{a: {json.dumps(template)}}}\n"
    )
    proc = cli(
        "run",
        "--suite",
        str(tmp_path / "s.yaml"),
        "--db",
        str(tmp_path / "r.duckdb"),
        "--model",
        "openai:x",
        "--base-url",
        "http://127.0.0.1:9/v1",
        env=cli_env(),
    )
    err = assert_clean_error(proc, "s.yaml", "reverse_templates", needle)
    assert len(err.strip().splitlines()) == 1
