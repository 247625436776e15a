"""`llmscope compare` (and the TUI compare screen): paired comparison of runs on one suite.

Numbers come from the metrics pipeline (`llmscope.analysis.metrics`): each run's accuracy is
the report's `accuracy` row, and the difference of each run against the first is a paired
cluster bootstrap on per-item differences (difference, interval, p-value) with the
program's one bootstrap configuration.
"""

from __future__ import annotations

from typing import Any

from llmscope.analysis.compare import mcnemar
from llmscope.analysis.metrics import (
    BOOTSTRAP,
    compute_metrics,
    paired_comparison,
    results_with_fields,
)
from llmscope.store.db import Store


class CompareError(ValueError):
    pass


def _accuracy(store: Store, run: dict[str, Any], df: Any, spec: dict[str, Any]) -> dict[str, Any]:
    rm = compute_metrics(df, run, spec, [], store=store, producers=["accuracy"])
    m = rm.get("accuracy") or rm.get("item_accuracy")
    return {
        "metric": m.name if m else "accuracy",
        "value": m.value if m else None,
        "ci95": m.ci95 if m else None,
        "n": m.n if m else 0,
        "n_clusters": m.n_clusters if m else 0,
        "interval_method": m.interval_method if m else None,
    }


def run_accuracy(store: Store, run: dict[str, Any]) -> dict[str, Any]:
    """A run's overall accuracy exactly as the report gives it (value, ci95, n, ...)."""
    return _accuracy(store, run, results_with_fields(store, run["run_id"]), store.suite_spec(run["suite_id"]))


def compare_runs(store: Store, run_ids: list[str]) -> dict[str, Any]:
    """Each run against the first: accuracies, paired difference (cluster bootstrap CI and
    p-value), McNemar when pairs are independent, disagreements."""
    if len(run_ids) < 2:
        raise CompareError("compare needs at least two runs")
    runs = []
    for rid in run_ids:
        run = store.find_run(rid)
        if run is None:
            raise CompareError(f"no run {rid!r}")
        runs.append(run)
    suites = {r["suite_id"] for r in runs}
    if len(suites) > 1:
        raise CompareError(f"runs are on different suites ({', '.join(sorted(suites))}); compare needs one suite")
    spec = store.suite_spec(runs[0]["suite_id"])
    cluster_field = spec.get("cluster_field") if isinstance(spec.get("cluster_field"), str) else None
    frames = [results_with_fields(store, r["run_id"]) for r in runs]
    base, base_df = runs[0], frames[0]
    out: dict[str, Any] = {
        "suite": base["suite_name"],
        "bootstrap": {"resamples": BOOTSTRAP.resamples, "seed": BOOTSTRAP.seed, "level": BOOTSTRAP.level},
        "base": {**_brief(base), "accuracy": _accuracy(store, base, base_df, spec)},
        "comparisons": [],
    }
    for run, df in zip(runs[1:], frames[1:], strict=True):
        c = paired_comparison(base_df, df, cluster_field)
        p = c.paired
        ba, bb = p["correct_a"] >= 0.5, p["correct_b"] >= 0.5
        b_only, c_only = int((ba & ~bb).sum()), int((~ba & bb).sum())
        if c.n and c.n_clusters == c.n:
            t = mcnemar(b_only, c_only)
            mc = {"statistic": t.statistic, "p": t.pvalue, "method": t.method}
        else:
            # Pairs within a cluster (prompt variants, permutations, a WorldSense tuple) are
            # dependent, which McNemar's test assumes away; the bootstrap p-value accounts for it.
            mc = {"statistic": None, "p": None, "method": "not applicable: dependent pairs within clusters"}
        out["comparisons"].append({
            "run": {**_brief(run), "accuracy": _accuracy(store, run, df, spec)},
            "n": c.n,
            "n_clusters": c.n_clusters,
            "acc_base": c.acc_a,
            "acc_run": c.acc_b,
            "diff": c.diff,
            "diff_ci95": [c.lo, c.hi],
            "p_value": c.p_value,
            "interval_method": c.interval_method,
            "mcnemar": {"b_base_only": b_only, "c_run_only": c_only, **mc},
            "disagreements": c.disagreements.reindex(
                columns=["item_id", "variant", "correct_a", "correct_b", "prediction_a", "prediction_b", "gold_a"]
            ).rename(columns={"correct_a": "correct_base", "correct_b": "correct_run", "prediction_a": "prediction_base",
                              "prediction_b": "prediction_run", "gold_a": "gold"}).to_dict("records"),
        })
    return out


def _brief(run: dict[str, Any]) -> dict[str, Any]:
    return {"run_id": run["run_id"], "model": run.get("model"), "status": run.get("status")}


def _f(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_compare(out: dict[str, Any]) -> str:
    """Text table: one line per compared run, then its disagreeing items."""
    b = out["base"]
    bs = out["bootstrap"]
    lines = [f"suite {out['suite']}; base {b['run_id']} ({b['model']}); paired cluster bootstrap "
             f"{bs['resamples']} resamples, seed {bs['seed']}"]
    for c in out["comparisons"]:
        m = c["mcnemar"]
        lo, hi = c["diff_ci95"]
        mc = (f"McNemar b={m['b_base_only']} c={m['c_run_only']} p={_f(m['p'], '.4g')} ({m['method']})")
        lines.append(
            f"  vs {c['run']['run_id']} ({c['run']['model']}): n={c['n']} clusters={c['n_clusters']}  "
            f"acc {_f(c['acc_base'], '.3f')} → {_f(c['acc_run'], '.3f')}  diff {_f(c['diff'], '+.3f')} "
            f"[{_f(lo, '+.3f')}, {_f(hi, '+.3f')}] p={_f(c['p_value'], '.4g')}  {mc}"
        )
        for d in c["disagreements"][:20]:
            lines.append(f"      {d['item_id']} / {d['variant']}: base {d['correct_base']:.0f}, run {d['correct_run']:.0f}")
        if len(c["disagreements"]) > 20:
            lines.append(f"      ... {len(c['disagreements']) - 20} more (use --json)")
    return "\n".join(lines)
