"""Derived suites (data/derived.py): a suite with its prompt templates replaced is another suite,
`<suite>~<level>`, with its own content hash; templates are checked (safe, fields the items
have, variants whose gold depends on them); a resume finds the derivation in the run's record.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from llmscope.data.derived import (
    Derivation,
    TemplateError,
    derivation_of_run,
    read_templates_file,
    with_templates,
)
from llmscope.data.suites import SuiteError, load_suite
from llmscope.engine.config import resume_inputs
from tests.helpers.cli import write_yesno_suite


@pytest.fixture
def yn(tmp_path: Path) -> Path:
    return write_yesno_suite(tmp_path / "yn", 4)


def _items(path: Path) -> list[dict]:
    return [json.loads(x) for x in (path.parent / "items.jsonl").read_text().splitlines()]


def test_derived_suite_has_its_name_templates_and_prompts(yn: Path) -> None:
    parent = load_suite(yn)
    d = with_templates(parent, {"a": "Q: {text}", "b": "True? {text}"}, "terse")
    assert d.name == "rel-yesno~terse" and d.suite_id.startswith("rel-yesno~terse@")
    assert d.variant_names() == ["a", "b"]
    texts = [r["text"] for r in _items(yn)]
    prompts = [(w.item.item_id, w.variant, w.prompt) for w in d.work()]
    assert prompts == [
        (f"q{i}", v, f"Q: {t}" if v == "a" else f"True? {t}")
        for i, t in enumerate(texts)
        for v in ("a", "b")
    ]
    # gold and items are the parent's
    assert [w.gold for w in d.work()] == [w.gold for w in parent.work()]
    # the spec records the parent and the level; describe() (runs.meta.suite) the templates
    assert d.spec["derived_from"] == {
        "suite": "rel-yesno",
        "suite_id": parent.suite_id,
        "level": "terse",
    }
    assert d.describe()["derived"]["templates"] == {"a": "Q: {text}", "b": "True? {text}"}
    # the parent is untouched
    assert parent.templates == {"a": "Question: {text}? Answer:", "b": "Is it true that {text}?"}


def test_identity_follows_templates_level_and_parent(yn: Path, tmp_path: Path) -> None:
    parent = load_suite(yn)
    one = with_templates(parent, {"a": "Q: {text}"}, "x")
    # the content hash is the spec's and the items' (computed here by hand)
    h = hashlib.sha256(json.dumps(one.spec, sort_keys=True, default=str).encode())
    h.update((yn.parent / "items.jsonl").read_bytes())
    assert one.suite_id == f"rel-yesno~x@{h.hexdigest()[:12]}"
    assert with_templates(load_suite(yn), {"a": "Q: {text}"}, "x").suite_id == one.suite_id
    ids = {
        one.suite_id,
        with_templates(parent, {"a": "Q:  {text}"}, "x").suite_id,  # one space more
        with_templates(parent, {"a": "Q: {text}"}, "y").suite_id,  # another level name
        with_templates(parent, {"b": "Q: {text}"}, "x").suite_id,  # another variant name
        parent.suite_id,
    }
    assert len(ids) == 5
    # a changed parent (one more item) gives another derived suite
    other = write_yesno_suite(tmp_path / "yn2", 5)
    assert with_templates(load_suite(other), {"a": "Q: {text}"}, "x").suite_id != one.suite_id


@pytest.mark.parametrize(
    ("templates", "level", "needle"),
    [
        ("Q: {text}", "x", "has 2 prompt variants (a, b)"),
        ({"a": "{nosuch}"}, "x", "names field 'nosuch'"),
        ({"a": "{text.__class__}"}, "x", "attribute access"),
        ({"a": "{0}"}, "x", "positional fields"),
        ({"a": 3}, "x", "maps variant names to template text"),
        ({}, "x", "non-empty mapping"),
        ({"a": "{text}"}, "has space", "becomes part of the suite's name"),
        ({"a": "{text}"}, "a~b", "becomes part of the suite's name"),
    ],
)
def test_bad_templates_are_refused_in_one_line(yn: Path, templates, level, needle) -> None:
    with pytest.raises(TemplateError) as ei:
        with_templates(load_suite(yn), templates, level)
    assert needle in str(ei.value) and "\n" not in str(ei.value)


def test_variant_gold_variants_keep_their_names() -> None:
    cs = load_suite("commonsense-sample")  # q3 has no gold (variant_gold)
    with pytest.raises(TemplateError, match="'q4' is not a variant of suite 'commonsense-sample'"):
        with_templates(cs, {"q4": "{statement}"}, "x")
    d = with_templates(cs, {"q1": "{statement}?", "q3": "Common sense? {statement}"}, "x")
    golds = {w.variant: w.gold for w in d.work(2)}
    assert golds["q3"] is None and d.variant_gold == {"q3": None}
    # one template for a one-variant suite
    mc = with_templates(load_suite("mc-sample"), "Q: {question}\nA:", "short")
    assert mc.templates == {"qa": "Q: {question}\nA:"}


def test_resume_reads_the_derivation_from_the_run(yn: Path) -> None:
    d = with_templates(load_suite(yn), {"a": "Q: {text}"}, "terse")
    run = {"meta": {"suite": d.describe()}, "options": {}}
    assert derivation_of_run(run) == Derivation("terse", {"a": "Q: {text}"})
    assert resume_inputs(run).suite_name == str(yn)  # the parent's spec, derived again
    assert derivation_of_run({"meta": {"suite": load_suite(yn).describe()}}) is None


def test_templates_file(tmp_path: Path) -> None:
    f = tmp_path / "expert.yaml"
    f.write_text("a: 'Expert: {text}'\n", encoding="utf-8")
    assert read_templates_file(str(f)) == Derivation("expert", {"a": "Expert: {text}"})
    assert read_templates_file(f"pro={f}") == Derivation("pro", {"a": "Expert: {text}"})
    t = tmp_path / "one.toml"
    t.write_text('templates = {a = "{text}"}\n', encoding="utf-8")
    assert read_templates_file(str(t)) == Derivation("one", {"a": "{text}"})
    with pytest.raises(SuiteError, match="--templates"):
        read_templates_file(str(tmp_path / "missing.yaml"))
