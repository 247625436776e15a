"""The task and suite registries (engine/tasks/registry.py, data/registry.py): the single
list of task types and suites, and each task's declared hooks."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from llmscope.data.registry import SUITES, builtin_suite_names, external_suite, suite_names
from llmscope.data.suites import (
    EXTERNAL_SUITES,
    TASK_TYPES,
    SuiteError,
    builtin_names,
    suite_from_spec,
)
from llmscope.engine.backend import Backend, BackendConfigError, Capabilities
from llmscope.engine.tasks import ItemField, get_task, task_names
from llmscope.engine.tasks.base import Task
from llmscope.engine.types import Item, Work

BUILTIN_TASKS = [
    "choice",
    "constrained",
    "contamination",
    "generation",
    "minpairs",
    "rating",
    "syntaxgym",
    "yesno",
]
CAPABILITIES = {f.name for f in dataclasses.fields(Capabilities)}
RESULT_COLUMNS = set(
    "prediction gold correct confidence error probs other option_scores top_tokens n_tokens prompt".split()
)


def test_every_built_in_task_is_found_and_listed_by_name() -> None:
    assert task_names() == BUILTIN_TASKS  # found on disk: engine/tasks/<name>.py
    assert list(TASK_TYPES) == BUILTIN_TASKS  # the old name is a view of the registry


def test_unknown_task_names_the_known_ones() -> None:
    with pytest.raises(
        KeyError, match="unknown task 'nope'; expected one of choice, constrained, contamination"
    ):
        get_task("nope")
    with pytest.raises(
        SuiteError, match="unknown task 'nope'; expected one of choice, constrained, contamination"
    ):
        suite_from_spec({"name": "x", "task": "nope"})


@pytest.mark.parametrize("name", task_names())  # every registered task, a new one included
def test_each_task_declares_its_hooks(name: str) -> None:
    cls = get_task(name)
    assert issubclass(cls, Task) and cls.name == name and cls.summary
    assert cls.default_method, "export needs a method label"
    assert cls.needs <= CAPABILITIES
    assert cls.item_fields and all(isinstance(f, ItemField) for f in cls.item_fields)
    for f in cls.item_fields:
        assert f.kind in ("text", "prob", "number", "bool", "json", "flags")
        head, _, key = f.key.partition(".")
        assert head in RESULT_COLUMNS | {"extra"}, f.key
        if head == "extra":
            assert key in cls.result_fields, (
                f"{name}: {f.key} is shown but not declared in result_fields"
            )


def test_tasks_are_the_single_source_of_their_producers() -> None:
    """Each task lists task-specific producers that exist; every task-specific producer is
    listed by some task (else it would never run); the pipeline names no task."""
    from llmscope.analysis.metrics import PRODUCERS

    registered = {p.name for p in PRODUCERS}
    specific = {p.name for p in PRODUCERS if not p.every_task}
    listed: set[str] = set()
    for name in task_names():
        mine = set(get_task(name).metric_producers)
        assert mine <= specific, (name, mine - registered)
        listed |= mine
    assert specific == listed
    import re

    # no analysis module tests a task's name (it asks the registry: task_producers / task_has)
    asks_name = re.compile(r'task"?\)?\s*(==|!=|not in|in)\s*\(?"(' + "|".join(task_names()) + ')"')
    for f in sorted((Path(__file__).parents[3] / "analysis").glob("*.py")):
        hits = [line for line in f.read_text().splitlines() if asks_name.search(line)]
        assert not hits, (f.name, hits)


def test_producers_run_only_for_tasks_that_list_them() -> None:
    """A task-specific producer is skipped for a task that does not list it, whatever the rows hold."""
    import pandas as pd

    from llmscope.analysis.metrics import compute_metrics

    df = pd.DataFrame(
        {
            "item_id": ["a", "b"],
            "variant": ["v", "v"],
            "correct": [1.0, 0.0],
            "p_yes": [0.9, 0.2],
            "p_no": [0.1, 0.8],
            "gold": ["yes", "no"],
            "prediction": ["yes", "no"],
            "error": [None, None],
        }
    )
    yes = compute_metrics(df, {"run_id": "r", "model": "m", "task": "yesno"})
    gen = compute_metrics(df, {"run_id": "r", "model": "m", "task": "generation"})
    assert yes.get("mean_p_yes") is not None and yes.get("mean_p_yes").value == pytest.approx(
        0.55
    )  # (0.9 + 0.2) / 2
    assert gen.get("mean_p_yes") is None and gen.get("accuracy") is not None


def test_task_traits_are_declared_and_asked_by_name() -> None:
    from llmscope.engine.tasks.registry import TRAITS, task_has

    for name in task_names():
        assert get_task(name).traits <= set(TRAITS), name
    assert task_has("syntaxgym", "regions") and not task_has("minpairs", "regions")
    assert (
        task_has("rating", "human_ratings")
        and not task_has(None, "regions")
        and not task_has("nope", "regions")
    )
    with pytest.raises(KeyError, match="unknown task trait 'region'"):
        task_has("syntaxgym", "region")


def test_export_method_labels_come_from_the_tasks() -> None:
    from llmscope.io.export import _method

    # by hand: the labels export wrote before the registry (llmscope/io/export.py DEFAULT_METHOD)
    want = {
        "yesno": "next-token",
        "rating": "next-token",
        "choice": "loglik",
        "minpairs": "loglik",
        "constrained": "constrained",
        "generation": "generate",
        "syntaxgym": "loglik-surprisal",
        "contamination": "min-k%-prob+greedy-completion",
    }
    assert {t: _method(t, {}, {}) for t in want} == want
    assert _method("choice", {"choice_method": "labels-topk"}, {}) == "labels-topk"
    assert _method("not-a-task", {}, {}) is None
    from llmscope.io.export import _lm_eval_metric

    assert {t: _lm_eval_metric(t) for t in ("generation", "choice", "yesno", None)} == {
        "generation": "exact_match",
        "choice": "acc",
        "yesno": "acc",
        None: "acc",
    }


# -- suite registry ------------------------------------------------------------------------
def test_external_suites_are_registered_with_their_tasks() -> None:
    want = {
        "commonsense": "yesno",
        "worldsense": "constrained",
        "cfc": "generation",
        "syntaxgym": "syntaxgym",
        "cfc-choice": "choice",
    }
    assert {n: SUITES[n].task for n in SUITES} == want
    assert dict(EXTERNAL_SUITES) == want  # the old name is a live view
    assert suite_names() == builtin_suite_names() + list(SUITES) == builtin_names()
    # the order they were added in (the TUI's suite table lists them so)
    assert suite_names()[-5:] == ["commonsense", "worldsense", "cfc", "syntaxgym", "cfc-choice"]
    entry = external_suite("worldsense")
    assert entry is not None and entry.large and external_suite("mc-sample") is None
    for name in SUITES:
        assert SUITES[name].task in task_names()


def test_an_external_suite_loads_through_its_registered_loader(tmp_path: Path) -> None:
    from llmscope.data.suites import load_suite

    with pytest.raises(SuiteError, match="no WorldSense trials file"):
        load_suite("worldsense", tmp_path / "missing.jsonl")


# -- suite rules owned by the tasks ----------------------------------------------------------
def _suite(task: str, **spec: Any) -> Any:
    return suite_from_spec({"name": "t", "task": task, **spec})


@pytest.mark.parametrize(
    ("task", "spec", "gold", "options", "problem"),
    [
        ("yesno", {}, "Yes ", None, None),
        (
            "yesno",
            {},
            "maybe",
            None,
            "gold 'maybe' is not one of the answers ['yes', 'no'] (compared lower-cased)",
        ),
        ("rating", {"answers": ["1", "2", "3"]}, "2.5", None, None),
        ("rating", {"answers": ["1", "2", "3"]}, "4", None, "gold '4' is outside the scale 1..3"),
        (
            "rating",
            {"answers": ["low", "high"]},
            "mid",
            None,
            "gold 'mid' is neither a scale label ['low', 'high'] nor a number",
        ),
        ("choice", {}, " APPLE", ["apple", "pear"], None),
        (
            "choice",
            {},
            "plum",
            ["apple", "pear"],
            "gold 'plum' is not one of the options ['apple', 'pear']",
        ),
        ("constrained", {}, "TRUE", ["true", "false"], None),
        (
            "constrained",
            {},
            "yes",
            ["true", "false"],
            "gold 'yes' is not one of the options ['true', 'false']",
        ),
        ("generation", {}, "anything", None, None),
    ],
)
def test_gold_rules(
    task: str, spec: dict[str, Any], gold: str, options: list[str] | None, problem: str | None
) -> None:
    s = _suite(task, **spec)
    assert get_task(task).gold_problem(gold, options, s) == problem


def test_answer_rules_come_from_the_task() -> None:
    assert _suite("yesno").answers == ["yes", "no"]
    with pytest.raises(SuiteError, match="a rating suite needs its scale labels"):
        _suite("rating")


def test_choice_expands_option_orders() -> None:
    s = _suite("choice", template="{q} {options}")
    it = Item("1", {"q": "Q?", "options": ["a", "b", "c"]}, gold="a", options=["a", "b", "c"])
    w = Work(
        item=it, variant="default", prompt="Q? ['a', 'b', 'c']", gold="a", options=["a", "b", "c"]
    )
    out = get_task("choice").expand_work(w, s, {"permutations": 2})
    assert [x.variant for x in out] == ["default", "default@p1", "default@p2"]
    for x in out[1:]:
        assert sorted(x.options or []) == ["a", "b", "c"] and x.options != ["a", "b", "c"]
        assert x.prompt == f"Q? {x.options}" and x.gold == "a"
    assert get_task("yesno").expand_work(w, s, {"permutations": 2}) == [w]


# -- capabilities ------------------------------------------------------------------------------
class Stub(Backend):
    kind = "stub"

    def __init__(self, caps: Capabilities) -> None:
        self.caps = caps

    @property
    def capabilities(self) -> Capabilities:
        return self.caps

    def describe(self) -> dict[str, Any]:
        return {"model": "m"}

    async def next_token(
        self, prompt: str, answers: list[str], *, chat: bool = True, top_k: int = 20
    ) -> Any:
        raise AssertionError

    async def loglik(self, requests: list[tuple[str, str]], *, chat: bool = False) -> Any:
        raise AssertionError


@pytest.mark.parametrize(
    ("task", "options", "caps", "missing"),
    [
        ("minpairs", {}, Capabilities(loglik=False), "loglik"),
        ("minpairs", {}, Capabilities(loglik=None), None),  # not known yet: the probe decides
        ("generation", {}, Capabilities(generate=False), "generate"),
        ("yesno", {}, Capabilities(loglik=False, generate=False), None),
        ("constrained", {"mode": "loglik"}, Capabilities(loglik=False, generate=True), "loglik"),
        ("constrained", {}, Capabilities(loglik=False, generate=False), None),  # auto: either
        ("contamination", {}, Capabilities(loglik=True, generate=False), "generate"),
    ],
)
def test_tasks_check_capabilities(
    task: str, options: dict[str, Any], caps: Capabilities, missing: str | None
) -> None:
    t = get_task(task)(options)
    if missing is None:
        t.check_backend(Stub(caps))
    else:
        with pytest.raises(
            BackendConfigError, match=f"task '{task}' needs {missing}, which stub backend 'm'"
        ):
            t.check_backend(Stub(caps))


def test_choice_needs_loglik_or_labels() -> None:
    t = get_task("choice")({})
    t.check_backend(Stub(Capabilities(loglik=False, label_choice=True)))
    with pytest.raises(BackendConfigError, match="log-likelihoods or label choice"):
        t.check_backend(Stub(Capabilities(loglik=False, label_choice=False)))


def test_probe_needs() -> None:
    # what the API backend probes for each task (engine/openai/probe.py `probe`)
    want = {
        "yesno": "next_token",
        "rating": "next_token",
        "choice": "options",
        "minpairs": "loglik",
        "constrained": "generate",
        "generation": "generate",
        "syntaxgym": "loglik",
        "contamination": "loglik",
    }
    assert {t: get_task(t)({}).probe_need() for t in want} == want
    assert get_task("constrained")({"mode": "loglik"}).probe_need() == "loglik"


def test_constrained_auto_mode_follows_local_loglik() -> None:
    t = get_task("constrained")({})
    assert t.mode_for(Stub(Capabilities(local_loglik=True))) == "loglik"
    assert t.mode_for(Stub(Capabilities(local_loglik=False))) == "generate"


def test_unknown_capability_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown capability 'telepathy'"):
        Capabilities().missing(["telepathy"])
