"""`llmscope compare`: paired comparison of runs on the same suite."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from llmscope.analysis.compare import compare_runs as _compare
from llmscope.store.db import Store, StoreError


class CompareError(ValueError):
    pass


def resolve_runs(stores: Sequence[Store], refs: Sequence[str]) -> list[tuple[dict[str, Any], Store]]:
    """Find each run reference in the given databases.

    A reference is a run id or unique prefix, looked up in every database (it must be found in
    exactly one), or `FILE:RUN` naming the database explicitly (FILE as passed to --db).
    """
    by_path = {str(s.path): s for s in stores}
    found: list[tuple[dict[str, Any], Store]] = []
    for ref in refs:
        db_part, sep, run_part = ref.rpartition(":")
        if sep and db_part in by_path:
            candidates = [by_path[db_part]]
            rid = run_part
        else:
            candidates, rid = list(stores), ref
        hits: list[tuple[dict[str, Any], Store]] = []
        for st in candidates:
            try:
                run = st.find_run(rid)
            except StoreError as e:
                raise CompareError(f"{st.path}: {e}") from e
            if run is not None:
                hits.append((run, st))
        if not hits:
            where = ", ".join(str(s.path) for s in candidates)
            raise CompareError(f"no run {rid!r} in {where}")
        if len(hits) > 1:
            where = ", ".join(f"{st.path}:{run['run_id']}" for run, st in hits)
            raise CompareError(f"run {rid!r} is in several databases ({where}); write FILE:RUN to pick one")
        found.append(hits[0])
    return found


def compare_runs(store: Store | Sequence[Store], run_ids: list[str]) -> dict[str, Any]:
    """Each run against the first: accuracies, paired difference (bootstrap CI), McNemar, disagreements.

    `store` may be several databases: runs are then looked up in each (see `resolve_runs`);
    runs from different files pair up when they score the same suite (same suite id, which is a
    hash of the suite's content).
    """
    if len(run_ids) < 2:
        raise CompareError("compare needs at least two runs")
    stores = [store] if isinstance(store, Store) else list(store)
    located = resolve_runs(stores, run_ids)
    runs = [run for run, _ in located]
    suites = {r["suite_id"] for r in runs}
    if len(suites) > 1:
        raise CompareError(f"runs are on different suites ({', '.join(sorted(suites))}); compare needs one suite")
    frames: list[pd.DataFrame] = [st.results_frame(r["run_id"], with_items=False) for r, st in located]
    frames = [f[f["error"].isna()] for f in frames]
    base, base_df = runs[0], frames[0]
    multi = len({str(st.path) for _, st in located}) > 1
    briefs = [_brief(r, str(st.path) if multi else None) for r, st in located]
    out: dict[str, Any] = {"suite": base["suite_name"], "base": briefs[0], "comparisons": []}
    for df, brief in zip(frames[1:], briefs[1:], strict=True):
        c = _compare(base_df, df, cluster_col="item_id")
        dis = c.disagreements
        out["comparisons"].append({
            "run": brief,
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


def _brief(run: dict[str, Any], db: str | None = None) -> dict[str, Any]:
    out = {"run_id": run["run_id"], "model": run.get("model"), "status": run.get("status")}
    if db is not None:
        out["db"] = db
    return out


def format_compare(out: dict[str, Any]) -> str:
    """Text table: one line per compared run, then its disagreeing items."""
    b = out["base"]
    lines = [f"suite {out['suite']}; base {_label(b)} ({b['model']})"]
    for c in out["comparisons"]:
        m = c["mcnemar"]
        lo, hi = c["diff_ci95"]
        lines.append(
            f"  vs {_label(c['run'])} ({c['run']['model']}): n={c['n']}  acc {c['acc_base']:.3f} → {c['acc_run']:.3f}  "
            f"diff {c['diff']:+.3f} [{lo:+.3f}, {hi:+.3f}]  McNemar b={m['b_base_only']} c={m['c_run_only']} "
            f"p={m['p']:.4g} ({m['method']})"
        )
        for d in c["disagreements"][:20]:
            lines.append(f"      {d['item_id']} / {d['variant']}: base {d['correct_base']:.0f}, run {d['correct_run']:.0f}")
        if len(c["disagreements"]) > 20:
            lines.append(f"      ... {len(c['disagreements']) - 20} more (use --json)")
    return "\n".join(lines)


def _label(brief: dict[str, Any]) -> str:
    return f"{brief['db']}:{brief['run_id']}" if brief.get("db") else str(brief["run_id"])
