"""The method sample suites load through the suite loader and fit their tasks."""

from __future__ import annotations

import collections

import pytest

from llmscope.data.suites import load_suite
from llmscope.engine.normalize import normalise
from llmscope.engine.tasks import get_task


def test_minimal_pairs_suite():
    s = load_suite("minimal-pairs")
    items = s.items()
    assert s.task == "minpairs" and len(items) >= 100
    assert "phenomenon" in s.group_by
    counts = collections.Counter(i.fields["phenomenon"] for i in items)
    assert set(counts) == {"sv_agreement", "reflexive_anaphora", "npi_licensing"}
    subtypes = {i.fields["subtype"] for i in items if i.fields["phenomenon"] == "sv_agreement"}
    assert subtypes == {"simple", "across_pp", "across_object_relative"}
    for it in items:
        good, bad = it.fields["sentences"]
        (a0, b0), (a1, b1) = it.fields["critical"]
        assert good != bad and it.fields.get("good", 0) == 0
        # outside the critical spans the two sentences are identical; inside they differ
        assert good[:a0] == bad[:a1] and good[b0:] == bad[b1:], it.item_id
        assert good[a0:b0] != bad[a1:b1] and good[a0:b0].strip() == good[a0:b0]


def test_mc_sample_suite():
    s = load_suite("mc-sample")
    items = s.items()
    assert s.task == "choice" and len(items) >= 30
    for it in items:
        assert it.gold in it.options and len(set(it.options)) == len(it.options)
    # the gold is not always in the same position
    assert len({it.options.index(it.gold) for it in items}) > 1


def test_rating_sample_suite():
    s = load_suite("rating-sample")
    assert s.task == "rating" and s.answers == ["1", "2", "3", "4", "5"]
    items = s.items()
    assert len(items) >= 30 and all(it.gold in s.answers for it in items)
    assert len({it.gold for it in items}) >= 3


def test_generation_sample_suite():
    s = load_suite("generation-sample")
    items = s.items()
    assert s.task == "generation" and len(items) >= 30
    assert s.task_options["stop"] == ["\n"]
    decimals = [it for it in items if any("." in a for a in it.fields["answers"])]
    assert len(decimals) >= 5
    for it in items:
        assert it.gold == it.fields["answers"][0]
        assert all(normalise(a)[0] for a in it.fields["answers"])


@pytest.mark.parametrize(
    "name,task",
    [
        ("mc-sample", "choice"),
        ("minimal-pairs", "minpairs"),
        ("rating-sample", "rating"),
        ("generation-sample", "generation"),
    ],
)
def test_tasks_registered(name, task):
    assert load_suite(name).task == task
    assert get_task(task).name == task
