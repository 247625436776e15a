"""ProbEval's validation protocol from the CLI: Spearman correlation between
automatic and gold-cluster KL across questions, with its interval. Expected values come from
scipy.stats.spearmanr and KLs worked out by hand from the smoothed counts."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import spearmanr

from llmscope.analysis.probeval import Question
from llmscope.analysis.probeval_validation import (
    held_out_validation,
    spearman_interval,
    spearman_validation,
)
from tests.helpers.cli import cli
from tests.helpers.paths import SHARED


def _validate(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """`llmscope probeval-validate ARGS --matcher exact` (exact matching: no WordNet needed)."""
    return cli("probeval-validate", *args, "--matcher", "exact", **kw)


def test_spearman_validation_matches_scipy_with_its_interval() -> None:
    rng = np.random.default_rng(3)
    a = rng.gamma(2.0, 1.0, 25)
    b = a + rng.normal(0, 1.0, 25)
    auto = {f"q{i}": float(x) for i, x in enumerate(a)}
    gold = {f"q{i}": float(x) for i, x in enumerate(b)}
    gold["extra"] = 1.0  # only shared questions count
    v = spearman_validation(auto, gold)
    ref = spearmanr(a, b)
    assert v.n_questions == 25
    assert v.rho == pytest.approx(ref.statistic) and v.p_value == pytest.approx(ref.pvalue)
    # Fisher z with the Bonett-Wright standard error sqrt((1 + rho^2/2) / (n - 3)), z_0.975 = 1.959964
    se = math.sqrt((1 + ref.statistic**2 / 2) / 22)
    lo, hi = (
        math.tanh(math.atanh(ref.statistic) - 1.959964 * se),
        math.tanh(math.atanh(ref.statistic) + 1.959964 * se),
    )
    assert (v.ci_low, v.ci_high) == (pytest.approx(lo, abs=1e-6), pytest.approx(hi, abs=1e-6))
    assert v.ci_low < v.rho < v.ci_high
    assert spearman_interval(0.5, 3) is None  # n - 3 = 0: no interval


def _q(qid: str, raw: dict[str, int], clusters: dict[str, list[str]]) -> Question:
    return Question(qid, "?", raw, clusters)


def test_held_out_validation_with_exact_matching_reproduces_the_gold_kl() -> None:
    # one answer per cluster: exact matching finds the true cluster of every held-out answer (or,
    # when no kept answer is in it, the reference lacks that cluster and both say wrong), so the
    # automatic KL equals the gold KL question by question. (With several members per cluster a
    # held-out member no kept answer spelled is a true miss of the matcher, counted against it.)
    qs = {
        "a": _q(
            "a", {"dog": 6, "cat": 3, "fish": 1}, {"c1": ["dog"], "c2": ["cat"], "c3": ["fish"]}
        ),
        "b": _q(
            "b", {"red": 2, "blue": 2, "green": 6}, {"c1": ["red"], "c2": ["blue"], "c3": ["green"]}
        ),
        "c": _q("c", {"tea": 9, "milk": 1}, {"c1": ["tea"], "c2": ["milk"]}),
        "d": _q(
            "d", {"sun": 4, "moon": 4, "star": 2}, {"c1": ["sun"], "c2": ["moon"], "c3": ["star"]}
        ),
        "e": _q("e", {"x": 5}, {}),  # no clusters: skipped
    }
    auto, gold = held_out_validation(qs, None, frac=0.5, seed=0)
    assert set(auto) == set(gold) == {"a", "b", "c", "d"}
    for q in auto:
        assert auto[q] == pytest.approx(gold[q])


def _targets(tmp: Path) -> Path:
    rows = [
        ("q1", {"dog": 6, "cat": 4}, {"c1": ["dog"], "c2": ["cat"]}),
        ("q2", {"red": 5, "blue": 5}, {"c1": ["red"], "c2": ["blue"]}),
        ("q3", {"tea": 8, "milk": 2}, {"c1": ["tea"], "c2": ["milk"]}),
        ("q4", {"sun": 3, "moon": 7}, {"c1": ["sun"], "c2": ["moon"]}),
    ]
    p = tmp / "t_targets.jsonl"
    p.write_text(
        "".join(
            json.dumps(
                {
                    "metadata": {"id": q},
                    "question": {"normalized": q},
                    "answers": {
                        "raw": raw,
                        "clusters": {k: {"count": 0, "answers": v} for k, v in cl.items()},
                    },
                }
            )
            + "\n"
            for q, raw, cl in rows
        )
    )
    return p


def _kl(human: list[int], model: list[int]) -> float:
    """KL(P_h || P_m) with the +1 smoothing over clusters + wrong, by hand."""
    ph = [(c + 1) / (sum(human) + len(human)) for c in human]
    pm = [(c + 1) / (sum(model) + len(model)) for c in model]
    return sum(p * math.log(p / q) for p, q in zip(ph, pm, strict=True))


def test_cli_validates_gold_labels_against_exact_matching(tmp_path: Path) -> None:
    targets = _targets(tmp_path)
    # model answers with a human's cluster labels; "hound" is labelled c1 but exact matching
    # cannot know it (it goes to wrong), so automatic and gold KL differ on q1 and q3
    gold = {
        "q1": [["dog", "c1"], ["hound", "c1"], ["cat", "c2"]],
        "q2": [["red", "c1"], ["blue", "c2"], ["blue", "c2"], ["red", "c1"]],
        "q3": [["hound", "c1"], ["tea", "c1"], ["tea", "c1"]],
        "q4": [["moon", "c2"], ["moon", "c2"], ["sun", "c1"], ["rock", "none"]],
    }
    gf = tmp_path / "gold.json"
    gf.write_text(json.dumps(gold))
    p = _validate(str(targets), "--gold", str(gf), "--json", timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    # buckets [c1, c2, wrong]; human counts from the targets, model counts from the answers
    exp_auto = {
        "q1": _kl([6, 4, 0], [1, 1, 1]),
        "q2": _kl([5, 5, 0], [2, 2, 0]),
        "q3": _kl([8, 2, 0], [2, 0, 1]),
        "q4": _kl([3, 7, 0], [1, 2, 1]),
    }
    exp_gold = {
        "q1": _kl([6, 4, 0], [2, 1, 0]),
        "q2": _kl([5, 5, 0], [2, 2, 0]),
        "q3": _kl([8, 2, 0], [3, 0, 0]),
        "q4": _kl([3, 7, 0], [1, 2, 1]),
    }
    got = {r["qid"]: r for r in out["per_question"]}
    for q in exp_auto:
        assert got[q]["auto_kl"] == pytest.approx(exp_auto[q]) and got[q][
            "gold_kl"
        ] == pytest.approx(exp_gold[q])
    ref = spearmanr(
        [exp_auto[q] for q in sorted(exp_auto)], [exp_gold[q] for q in sorted(exp_auto)]
    )
    assert out["rho"] == pytest.approx(ref.statistic) and out["n_questions"] == 4
    assert out["matcher"] == "exact" and out["ci_low"] <= out["rho"] <= out["ci_high"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gold", "missing.json"], "file not found: missing.json"),
        (["--frac", "1.5"], "--frac must be between 0 and 1"),
        (["--sets", "2"], "--sets must be at least 3"),
        (["--protocol", "held-out", "--pool", "pool.json"], "--pool belongs to --protocol mixture"),
        (["--pool", "pool.json"], "pool.json: none of its 1 questions are in the targets file"),
    ],
)
def test_cli_bad_input_is_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "pool.json").write_text(json.dumps({"zz": [["tea", "c1"]]}))
    p = _validate(str(_targets(tmp_path)), *args, timeout=120, cwd=tmp_path)
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


CFC = SHARED / "data" / "cfc"


@pytest.mark.slow
@pytest.mark.skipif(
    not (CFC / "cfc_dev_targets.jsonl").is_file(), reason="../shared/data/cfc is not present"
)
def test_cli_held_out_validation_on_the_shared_cfc_targets() -> None:
    p = _validate(
        str(CFC / "cfc_dev_targets.jsonl"), "--protocol", "held-out", "--json", timeout=300
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    per = out["per_question"]
    assert out["n_questions"] == len(per) == 54
    ref = spearmanr([r["auto_kl"] for r in per], [r["gold_kl"] for r in per])
    assert out["rho"] == pytest.approx(ref.statistic)
    # exact matching never puts an answer in a wrong cluster, only in "wrong": the two KLs agree in rank
    assert out["rho"] > 0
