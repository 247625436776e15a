"""docs/METRICS.md audited against the code: each metric `llmscope report --json` prints for a
yes/no and a choice run of the embedded model is recomputed by hand from the rows
`llmscope export --format jsonl` writes (numpy only; no llmscope metric code)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def _cli(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "llmscope", *args], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _ece_mce(conf: np.ndarray, correct: np.ndarray) -> tuple[float, float]:
    """10 equal-width bins [i/10, (i+1)/10), the last closed; by hand."""
    ece, mce = 0.0, 0.0
    for i in range(10):
        lo, hi = i / 10, (i + 1) / 10
        m = (conf >= lo) & ((conf < hi) if i < 9 else (conf <= hi))
        if m.any():
            gap = abs(correct[m].mean() - conf[m].mean())
            ece += m.sum() / len(conf) * gap
            mce = max(mce, gap)
    return ece, mce


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("audit")
    db = str(d / "a.duckdb")
    out: dict[str, Any] = {}
    for suite, extra in (
        ("commonsense-sample", ["--limit", "12"]),
        ("mc-sample", ["--limit", "10", "--opt", 'schemes=["acc_norm"]']),
    ):
        _cli(
            "run", "--suite", suite, "--db", db, "--threads", "1", "--quiet", "--no-report", *extra
        )
    report = json.loads(_cli("report", "--db", db, "--json"))
    for suite in ("commonsense-sample", "mc-sample"):
        rows = [r for r in report if r.get("suite") == suite]
        run_id = rows[0]["run"]
        lines = _cli("export", "--db", db, "--run", run_id, "--format", "jsonl").splitlines()
        out[suite] = (
            {(r["metric"], json.dumps(r["group"], sort_keys=True)): r["value"] for r in rows},
            [json.loads(x) for x in lines],
        )
    return out


def _get(rep: dict, metric: str, **group: Any) -> float:
    return rep[(metric, json.dumps(group, sort_keys=True))]


def test_yesno_metrics_recomputed_from_exported_rows(runs: dict[str, Any]) -> None:
    rep, rows = runs["commonsense-sample"]
    ok = [r for r in rows if r["error"] is None]
    py = np.array([r["p_yes"] for r in ok])
    pn = np.array([r["p_no"] for r in ok])
    po = np.array([r["p_other"] for r in ok])
    scored = [r for r in ok if r["correct"] is not None]
    corr = np.array([r["correct"] for r in scored])
    assert _get(rep, "accuracy") == pytest.approx(corr.mean())
    assert _get(rep, "mean_p_yes") == pytest.approx(py.mean())
    assert _get(rep, "mean_p_no") == pytest.approx(pn.mean())
    assert _get(rep, "mean_p_other") == pytest.approx(po.mean())
    assert np.allclose(po, 1 - py - pn, atol=1e-6)
    assert _get(rep, "pred_yes_rate") == pytest.approx(np.mean(py > pn))
    assert _get(rep, "off_format_rate") == pytest.approx(np.mean(po > py + pn))
    g = [(r["p_yes"] > r["p_no"], r["gold"] == "yes") for r in ok if r["gold"] in ("yes", "no")]
    assert _get(rep, "gold_yes_rate") == pytest.approx(np.mean([b for _, b in g]))
    assert _get(rep, "yes_bias") == pytest.approx(np.mean([float(a) - float(b) for a, b in g]))
    # ece: confidence renormalised over yes/no; ece_raw: the raw P(pred)
    conf = np.array([max(r["p_yes"], r["p_no"]) / (r["p_yes"] + r["p_no"]) for r in scored])
    assert np.allclose(conf, [r["confidence"] for r in scored])
    ece, mce = _ece_mce(conf, corr)
    assert _get(rep, "ece") == pytest.approx(ece) and _get(rep, "mce") == pytest.approx(mce)
    raw = np.array([r["probs"][r["prediction"]] for r in scored])
    ece_raw, mce_raw = _ece_mce(raw, corr)
    assert _get(rep, "ece_raw") == pytest.approx(ece_raw) and _get(rep, "mce_raw") == pytest.approx(
        mce_raw
    )
    assert ece_raw != pytest.approx(ece)  # SmolLM2 leaves mass on other tokens: the two differ
    # brier over the listed answers (not renormalised), brier_yes on P(yes)
    brier = [sum((p - (k == r["gold"])) ** 2 for k, p in r["probs"].items()) for r in scored]
    assert _get(rep, "brier") == pytest.approx(np.mean(brier))
    assert _get(rep, "brier_yes") == pytest.approx(
        np.mean([(r["p_yes"] - (r["gold"] == "yes")) ** 2 for r in scored])
    )
    assert _get(rep, "tie_rate") == pytest.approx(
        np.mean([r["p_yes"] == r["p_no"] for r in scored])
    )


def test_choice_metrics_recomputed_from_exported_rows(runs: dict[str, Any]) -> None:
    rep, rows = runs["mc-sample"]
    ok = [r for r in rows if r["error"] is None and r["correct"] is not None]
    corr = np.array([r["correct"] for r in ok])
    assert _get(rep, "accuracy") == pytest.approx(corr.mean())

    def method_acc(score: Any, strict: bool = True) -> float:
        hits = []
        for r in ok:
            opts = list(r["option_scores"])
            s = np.array([score(o, r["option_scores"][o]) for o in opts])
            gi = opts.index(r["gold"])
            best = s.max()
            hits.append(
                float(
                    s[gi] == best
                    and (np.sum(s == best) == 1 or not strict)
                    and (strict or int(np.argmax(s)) == gi)
                )
            )
        return float(np.mean(hits))

    assert _get(rep, "accuracy", method="raw") == pytest.approx(
        method_acc(lambda o, v: v["logprob"])
    )
    # per_char divides by the continuation " option" (its space counted) ...
    assert _get(rep, "accuracy", method="per_char") == pytest.approx(
        method_acc(lambda o, v: v["logprob"] / len(" " + o))
    )
    # ... lm-eval's acc_norm by the option text alone, first maximum credited
    assert _get(rep, "accuracy", method="acc_norm") == pytest.approx(
        method_acc(lambda o, v: v["logprob"] / len(o), strict=False)
    )
    assert _get(rep, "accuracy", method="mean_token") == pytest.approx(
        method_acc(lambda o, v: v["logprob"] / v["n_tokens"])
    )
    # expected accuracy (raw): softmax of the log-likelihoods at the gold option
    ea = []
    for r in ok:
        lp = np.array([v["logprob"] for v in r["option_scores"].values()])
        p = np.exp(lp - lp.max()) / np.exp(lp - lp.max()).sum()
        ea.append(p[list(r["option_scores"]).index(r["gold"])])
    assert _get(rep, "expected_accuracy", method="raw") == pytest.approx(np.mean(ea))
    # position: the first / last listed option chosen, and gold there
    for pos, i in (("first", 0), ("last", -1)):
        assert _get(rep, "chosen_rate", position=pos) == pytest.approx(
            np.mean([list(r["option_scores"])[i] == r["prediction"] for r in ok])
        )
        assert _get(rep, "gold_rate", position=pos) == pytest.approx(
            np.mean([list(r["option_scores"])[i] == r["gold"] for r in ok])
        )
    conf = np.array([max(r["probs"].values()) for r in ok])
    ece, mce = _ece_mce(conf, corr)
    assert _get(rep, "ece") == pytest.approx(ece) and _get(rep, "mce") == pytest.approx(mce)
    assert ("ece_raw", "{}") not in rep  # softmax over the options: nothing outside them
    brier = [sum((p - (k == r["gold"])) ** 2 for k, p in r["probs"].items()) for r in ok]
    assert _get(rep, "brier") == pytest.approx(np.mean(brier))
    # scheme_acc_range: max - min over the methods stored with each row of their accuracy
    names = list(ok[0]["extra"]["methods"])
    accs = [np.mean([r["extra"]["methods"][m]["correct"] for r in ok]) for m in names]
    got = _get(rep, "scheme_acc_range", schemes=len(names))
    assert got == pytest.approx(max(accs) - min(accs)) and not math.isnan(got)
