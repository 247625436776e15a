"""`llmscope report`: renders the metrics pipeline (`llmscope.analysis.metrics`).

Every number is recomputed from the `results` table by `compute_metrics`, so it can be
traced to per-item rows (`llmscope export`). Rows have one shape for text and JSON:
{run, model, suite, group, metric, value, ci95: [lo, hi] | None, n, interval_method,
n_clusters}.
"""

from __future__ import annotations

import re
import textwrap
import warnings
from typing import Any

import pandas as pd

from llmscope.analysis.metric_values import RunMetrics
from llmscope.analysis.metrics import BOOTSTRAP
from llmscope.analysis.metrics import results_with_fields as _results_with_fields
from llmscope.analysis.metrics import run_metrics as _run_metrics
from llmscope.analysis.rows import format_p
from llmscope.data.registry import suite_producers
from llmscope.store.db import Store


def results_with_fields(store: Store, run_id: str) -> pd.DataFrame:
    """A run's results with each item's fields expanded into `f.<name>` columns."""
    return _results_with_fields(store, run_id)


def run_metrics(store: Store, run: dict[str, Any], by: list[str] | None = None) -> RunMetrics:
    """The run's typed metrics (the one pipeline, `llmscope.analysis.metrics`)."""
    return _run_metrics(store, run, by)


def build_report(
    store: Store, run: dict[str, Any], by: list[str] | None = None
) -> list[dict[str, Any]]:
    """All per-run metric rows: a thin wrapper over the metrics pipeline.

    Other modules add their rows with one line each, marked `# pipeline: <name>`; they are
    moved into the pipeline's producer registry (`analysis.metrics.register_row_producer`).
    """
    rm = _run_metrics(store, run, by)
    if not rm.metrics:
        return []
    rows = rm.rows()
    meta = run.get("meta") or {}
    if not (isinstance(meta, dict) and meta.get("plan")):
        return rows
    from llmscope.runs.plan import plan_rows

    df = results_with_fields(store, run["run_id"])  # hypotheses filter on any item field
    spec = store.suite_spec(run["suite_id"])
    return plan_rows(df, run, spec, rows)  # pre-registered hypotheses first, the rest exploratory


def probeval_for_run(
    store: Store, run: dict[str, Any], *, embed: Any = "auto", save: bool = False
) -> Any:
    """ProbEval of a run (see `llmscope.analysis.probeval_run.probeval_for_run`)."""
    from llmscope.analysis.probeval_run import probeval_for_run as _pe

    return _pe(store, run, embed=embed, save=save)


def _default_embedder() -> Any:
    """MiniLM sentence embeddings when installed, else exact matching only."""
    from llmscope.analysis.probeval_run import default_embedder

    return default_embedder()


def worldsense_reports(
    store: Store, runs: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The WorldSense authors' analysis over every WorldSense run: rows and printable tables."""
    ws = [r for r in runs if "worldsense" in suite_producers(r.get("suite_name"))]
    if not ws:
        return [], []
    # Each run's metrics (cached) hold its authors' tables: with one run per (model, prompting)
    # group, the tables over all runs are those stacked (the authors' statistics are computed
    # within a group); else each run's per-tuple table, then a few group-bys; else the trials.
    arts, promptings = [], []
    n_incomplete = 0
    for run in ws:
        art = _run_metrics(store, run).artifacts
        opts = run.get("options") or {}
        promptings.append(
            (opts.get("import") or {}).get("prompting")
            or (opts.get("task") or {}).get("prompting")
            or "basic"
        )
        arts.append(art)
        n_incomplete += int(art.get("worldsense_incomplete") or 0)
    warned = (
        [f"WorldSense: {n_incomplete} trial(s) of incomplete tuples excluded"]
        if n_incomplete
        else []
    )
    groups = [(str(r.get("model")), p) for r, p in zip(ws, promptings, strict=True)]
    names = (
        "worldsense_accuracy_table",
        "worldsense_problem_accuracy_table",
        "worldsense_problem_bias_table",
    )
    if len(set(groups)) == len(groups) and all(all(n in a for n in names) for a in arts):
        from llmscope.analysis.worldsense import WorldSenseReport

        def stack(name: str, keys: list[str]) -> pd.DataFrame:
            t = pd.concat(
                [a[name].assign(prompting=p) for a, p in zip(arts, promptings, strict=True)],
                ignore_index=True,
            )
            return t.sort_values(keys, kind="stable").reset_index(drop=True)

        acc = stack(names[0], ["prompting", "modelname"])
        pacc = stack(names[1], ["prompting", "modelname", "problemname"])
        pbias = stack(names[2], ["prompting", "problemname", "modelname"])
        rep = WorldSenseReport(pd.DataFrame(), acc, pacc, pbias, n_incomplete)
        return _worldsense_output(rep, ws, warned)
    # The per-tuple tables are not kept in the store's cache (40k rows a run): recompute them.
    arts = [
        a if "worldsense_tuples" in a else _run_metrics(store, run, cache=False).artifacts
        for a, run in zip(arts, ws, strict=True)
    ]
    if not all("worldsense_tuples" in a for a in arts):
        return _worldsense_reports_from_rows(store, ws)
    from llmscope.analysis.worldsense import analyse_tuples

    tables = [
        a["worldsense_tuples"].assign(prompting=p) for a, p in zip(arts, promptings, strict=True)
    ]
    rep = analyse_tuples(pd.concat(tables, ignore_index=True), n_incomplete)
    return _worldsense_output(rep, ws, warned)


def _worldsense_reports_from_rows(
    store: Store, ws: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The authors' analysis rebuilt from the stored trials (runs whose metrics hold no tuple table)."""
    from llmscope.analysis.queries import item_fields_frame
    from llmscope.analysis.worldsense import analyse, worldsense_frame

    items = item_fields_frame(
        store,
        ws[0]["suite_id"],
        ["tuple_ID", "expectedresp", "options", "problemname", "problemsize"],
    )
    items = items.rename(columns={"item_id": "Key", "gold": "goldresp"})
    if items["expectedresp"].isna().all():
        items["expectedresp"] = items["options"]
    items = items.drop(columns=["options"])
    frames = []
    for run in ws:
        res = store.query_df(
            "SELECT item_id, prediction, error FROM results WHERE run_id = ? ORDER BY seq",
            [run["run_id"]],
        )
        opts = run.get("options") or {}
        prompting = (
            (opts.get("import") or {}).get("prompting")
            or (opts.get("task") or {}).get("prompting")
            or "basic"
        )
        resp = res["prediction"].where(res["error"].isna(), "").fillna("")
        frames.append(
            pd.DataFrame(
                {
                    "Key": res["item_id"],
                    "resp": resp,
                    "modelname": str(run.get("model")),
                    "prompting": prompting,
                }
            )
        )
    df = worldsense_frame(items, pd.concat(frames, ignore_index=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rep = analyse(df)
    return _worldsense_output(rep, ws, [str(w.message) for w in caught])


def _worldsense_output(
    rep: Any, ws: list[dict[str, Any]], warned: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    from llmscope.analysis.worldsense import report_rows

    rows = []
    by_model = {str(r.get("model")): r for r in ws}
    for row in report_rows(rep, "worldsense"):
        ws_run = by_model.get(row["model"])
        row["run"] = ws_run["run_id"] if ws_run else row["run"]
        row["suite"] = "worldsense"
        rows.append(row)
    text = [
        "",
        "WorldSense (the authors' analysis: tuple-weighted, rebalanced; mean (ci95), accuracy in %)",
    ]
    text.append(rep.pivot("accuracy").to_string())
    text += ["", "accuracy per problem", rep.pivot("problem_accuracy").to_string()]
    text += [
        "",
        "bias per problem (+1 = always TRUE/POSSIBLE/KNOW)",
        rep.pivot("problem_bias").to_string(),
    ]
    for w in warned:
        text.append(f"warning: {w}")
    return rows, text


def explain_text() -> str:
    """`report --explain`: every metric's definition and interval (docs/METRICS.md)."""
    from llmscope.analysis.metrics import metrics_markdown

    return metrics_markdown()


def _group_text(r: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in r["group"].items()) or "overall"


def _ci_text(r: dict[str, Any]) -> str:
    ci = r.get("ci95")
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci and ci[0] is not None and ci[1] is not None else ""


def _nums(r: dict[str, Any], mw: int, cw: int) -> str:
    """A row's metric name, value, interval and counts, in columns ``mw`` and ``cw`` wide."""
    from llmscope.analysis.metrics import display

    nc = r.get("n_clusters")
    clus = f" clusters={nc}" if nc is not None and nc != r["n"] else ""
    return f"{r['metric']:<{mw}} {display(r['metric'], r['value']):>8} {_ci_text(r):<{cw}} n={r['n']}{clus}"


def _fit(line: str, width: int | None, parts: list[str] | None = None) -> list[str]:
    """``line`` as is off a terminal, or wrapped to ``width``: each of ``parts`` starts a line
    and continues indented, broken between words but never inside an interval's brackets
    (the terminal would break it anywhere)."""
    if width is None or len(line) <= width:
        return [line]
    out: list[str] = []
    for part in parts or [line]:
        # a no-break space inside [lo, hi] keeps the interval on one line
        glued = re.sub(r"\[[^\]]*\]", lambda m: m.group(0).replace(" ", "\u00a0"), part.strip())
        out += [
            ln.replace("\u00a0", " ")
            for ln in textwrap.wrap(
                glued,
                width,
                initial_indent="  " if not out else "      ",
                subsequent_indent="      ",
                break_long_words=False,
                break_on_hyphens=False,
            )
        ]
    return out


def format_rows(rows: list[dict[str, Any]], width: int | None = None) -> str:
    """Plain-text table of metric rows (values at the pipeline's display precision).

    Columns are as wide as their longest cell (a group is never cut). With ``width`` (the
    terminal's columns), a line that would not fit puts its group on a line of its own and the
    numbers indented beneath, rather than letting the terminal break it anywhere; without it
    (output to a file or pipe) every row is one line."""

    if not rows:
        return "(no results)"
    plain = [r for r in rows if r["metric"] not in ("hypothesis", "plan_deviation")]
    gw = max((len(_group_text(r)) for r in plain), default=7)
    mw = max((len(r["metric"]) for r in plain), default=8)
    cw = max((len(_ci_text(r)) for r in plain), default=0)
    if width is not None:  # the group column narrows to what the numbers leave; longer groups
        nw = max((len(_nums(r, mw, cw)) for r in plain), default=0)  # go on lines of their own
        gw = max(min(gw, width - 3 - nw), 7)
    note = (
        f"({BOOTSTRAP.describe()}; clusters in n_clusters; definitions: llmscope report --explain)"
    )
    lines = textwrap.wrap(note, width) if width is not None else [note]
    cur = None
    section = None
    for r in rows:
        head = f"{r['run']}  {r.get('suite')}  {r.get('model')}"
        if head != cur:
            lines.append(head)
            cur = head
            section = None
        if (
            "preregistered" in r and r["preregistered"] != section
        ):  # runs made with a plan (llmscope/runs/plan.py)
            section = r["preregistered"]
            lines.append(
                "  -- pre-registered (plan) --"
                if section
                else "  -- exploratory (not in the plan) --"
            )
        if r["metric"] == "hypothesis":
            g = r["group"]
            ci = r.get("ci95")
            cis = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
            p = r.get("p_value")
            est = "-" if r["value"] is None else f"{r['value']:+.3f}"
            verdict = f"  {g['id']}: {g['hypothesis']}  -> {g['verdict']}"
            detail = f"(difference {est} {cis}, p = {format_p(p)}, {r.get('test')}, n={r['n']})"
            lines += _fit(f"{verdict}  {detail}", width, [verdict, detail])
            continue
        if r["metric"] == "plan_deviation":
            lines += _fit(f"  DEVIATION from plan: {r['group']['deviation']}", width)
            continue
        group = _group_text(r)
        nums = _nums(r, mw, cw)
        line = f"  {group:<{gw}} {nums}"
        if width is not None and (len(line) > width or len(group) > gw):
            lines += [f"  {group}", f"      {nums}"]
        else:
            lines.append(line)
    return "\n".join(lines)
