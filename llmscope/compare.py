"""`llmscope compare`: paired comparison of runs on the same suite."""

from __future__ import annotations

from typing import Any

from llmscope.analysis.compare import compare_runs as _compare
from llmscope.store.db import Store


class CompareError(ValueError):
    pass


def compare_runs(store: Store, run_ids: list[str]) -> dict[str, Any]:
    """Each run against the first: accuracies, paired difference (bootstrap CI), McNemar, disagreements."""
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
    frames = [store.results_frame(r["run_id"], with_items=False) for r in runs]
    frames = [f[f["error"].isna()] for f in frames]
    base, base_df = runs[0], frames[0]
    out: dict[str, Any] = {"suite": base["suite_name"], "base": _brief(base), "comparisons": []}
    for run, df in zip(runs[1:], frames[1:], strict=False):
        c = _compare(base_df, df, cluster_col="item_id")
        dis = c.disagreements
        out["comparisons"].append({
            "run": _brief(run),
            "n": c.n,
            "acc_base": c.acc_a,
            "acc_run": c.acc_b,
            "diff": c.diff,
            "diff_ci95": [c.diff_lo, c.diff_hi],
            "mcnemar": {"b_base_only": c.mcnemar.b, "c_run_only": c.mcnemar.c,
                        "statistic": c.mcnemar.statistic, "p": c.mcnemar.pvalue, "method": c.mcnemar.method},
            "disagreements": dis[["item_id", "variant", "correct_a", "correct_b"]].rename(
                columns={"correct_a": "correct_base", "correct_b": "correct_run"}).to_dict("records"),
        })
    return out


def _brief(run: dict[str, Any]) -> dict[str, Any]:
    return {"run_id": run["run_id"], "model": run.get("model"), "status": run.get("status")}


def format_compare(out: dict[str, Any]) -> str:
    """Text table: one line per compared run, then its disagreeing items."""
    b = out["base"]
    lines = [f"suite {out['suite']}; base {b['run_id']} ({b['model']})"]
    for c in out["comparisons"]:
        m = c["mcnemar"]
        lo, hi = c["diff_ci95"]
        lines.append(
            f"  vs {c['run']['run_id']} ({c['run']['model']}): n={c['n']}  acc {c['acc_base']:.3f} → {c['acc_run']:.3f}  "
            f"diff {c['diff']:+.3f} [{lo:+.3f}, {hi:+.3f}]  McNemar b={m['b_base_only']} c={m['c_run_only']} "
            f"p={m['p']:.4g} ({m['method']})"
        )
        for d in c["disagreements"][:20]:
            lines.append(f"      {d['item_id']} / {d['variant']}: base {d['correct_base']:.0f}, run {d['correct_run']:.0f}")
        if len(c["disagreements"]) > 20:
            lines.append(f"      ... {len(c['disagreements']) - 20} more (use --json)")
    return "\n".join(lines)
