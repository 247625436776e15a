"""The built-in one-shot ProbEval example suite: it ships with the package (no
../shared), samples as the paper does (one-shot "[Q]: ... [A]:" prompt, nucleus sampling, several
answers per question) and its runs get a ProbEval KL. Expected KLs are worked out here with
scipy.stats.entropy from the suite's counts and the stored samples."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import entropy

from llmscope.data.suites import BUILTIN_DIR, load_suite
from llmscope.engine.runner import RunPlan
from llmscope.report import probeval_for_run
from llmscope.store.db import Store
from tests.helpers.cli import cli
from tests.helpers.tinymodel import make_tiny_model, run_plan, tiny_backend

NAME = "probeval-oneshot"


def _items() -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in (BUILTIN_DIR / NAME / "items.jsonl").read_text().splitlines()
        if line
    ]


def test_suite_ships_consistent_clusters_and_the_papers_sampling() -> None:
    suite = load_suite(NAME)
    assert suite.task == "generation"
    items = _items()
    assert len(items) == 8
    for r in items:
        # every raw answer in exactly one cluster, cluster counts = the sum of their members
        members = [a for c in r["clusters"].values() for a in c["answers"]]
        assert sorted(members) == sorted(r["raw"])
        for c in r["clusters"].values():
            assert c["count"] == sum(r["raw"][a] for a in c["answers"])
        assert sum(r["raw"].values()) == 20
    (tpl,) = suite.templates.values()
    assert (
        tpl.count("[Q]:") == 2 and tpl.endswith("[A]:") and "{question}" in tpl
    )  # one worked example
    opts = suite.task_options
    assert (
        opts["n"] > 1
        and opts["temperature"] > 0
        and 0 < opts["top_p"] < 1
        and opts["chat"] is False
    )


def _norm(s: str) -> str:
    s = re.sub(r"[^\w\s]", " ", s.replace("<|endoftext|>", " ").lower())
    return re.sub(r"^(a|an|the)\s+", "", " ".join(s.split()))


@pytest.mark.slow
def test_tiny_model_run_gets_the_probeval_kl(tmp_path: Path) -> None:
    model, tok = make_tiny_model(tmp_path)
    backend = tiny_backend(tmp_path, model, tok)
    db = tmp_path / "pe.duckdb"
    with Store(db) as store:
        plan = RunPlan(
            suite=load_suite(NAME),
            model_label="tiny",
            model_arg="tiny",
            limit=2,
            task_options={"n": 3, "max_new_tokens": 4},
        )

        run = store.get_run(run_plan(plan, backend, store).run_id)
        assert run is not None
        res = probeval_for_run(store, run, embed=None)  # exact matching: checkable by hand
        df = store.results_frame(run["run_id"])
    assert res is not None and len(res.scores) == 2
    items = {r["id"]: r for r in _items()}
    kls = []
    for rec in df.to_dict("records"):
        item = items[rec["item_id"]]
        extra = json.loads(rec["extra"]) if isinstance(rec["extra"], str) else rec["extra"]
        samples = [s["text"] if isinstance(s, dict) else s for s in extra["samples"]]
        assert len(samples) == 3
        member = {_norm(a): k for k, c in item["clusters"].items() for a in c["answers"]}
        names = list(item["clusters"])
        human = [item["clusters"][k]["count"] for k in names] + [0]
        got = [member.get(_norm(s)) for s in samples]
        model_counts = [sum(g == k for g in got) for k in names] + [sum(g is None for g in got)]
        # Laplace smoothing over the clusters + "wrong", then KL(P_human || P_model)
        ph = [(c + 1) / (sum(human) + len(human)) for c in human]
        pm = [(c + 1) / (sum(model_counts) + len(model_counts)) for c in model_counts]
        kl = float(entropy(ph, pm))
        assert res.scores[rec["item_id"]].kl == pytest.approx(kl)
        kls.append(kl)
    assert res.mean_kl == pytest.approx(sum(kls) / len(kls))


@pytest.mark.slow
def test_embedded_model_run_and_report_without_shared(tmp_path: Path) -> None:
    """The embedded SmolLM2 samples answers; `llmscope report` shows probeval_kl (from the package's
    own suite files: the working directory has no ../shared)."""
    db = tmp_path / "pe.duckdb"
    p = cli(
        *("--db", str(db), "run", "--suite", NAME, "--limit", "1", "--opt", "n=3"),
        *("--threads", "1", "--quiet"),
        timeout=600,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    line = next(ln for ln in p.stdout.splitlines() if "probeval_kl" in ln and "overall" in ln)
    kl = float(line.split("probeval_kl")[1].split()[0])
    assert 0 < kl < 10
