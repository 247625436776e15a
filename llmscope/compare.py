"""`llmscope compare` (and the TUI compare screen): paired comparison of runs on one suite.

Numbers come from the metrics pipeline (`llmscope.analysis.metrics`): each run's accuracy is
the report's `accuracy` row, and the difference of each run against the first is a paired
cluster bootstrap on per-item differences (difference, interval, p-value) with the
program's one bootstrap configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from llmscope.analysis.compare import mcnemar
from llmscope.analysis.metrics import BOOTSTRAP, run_metrics
from llmscope.analysis.paired import paired_comparison
from llmscope.analysis.queries import metric_frame
from llmscope.analysis.rows import format_p
from llmscope.store.db import Store, StoreError


class CompareError(ValueError):
    pass


def _accuracy(
    store: Store, run: dict[str, Any], items: frozenset[str] | None = None
) -> dict[str, Any]:
    # the report's numbers: the same cached RunMetrics (store's metrics cache); on `items` only
    # when the compared runs hold different item sets
    rm = run_metrics(store, run) if items is None else run_metrics(store, run, items=items)
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
    return _accuracy(store, run)


def resolve_runs(
    stores: Sequence[Store], refs: Sequence[str]
) -> list[tuple[dict[str, Any], Store]]:
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
            raise CompareError(
                f"run {rid!r} is in several databases ({where}); write FILE:RUN to pick one"
            )
        found.append(hits[0])
    return found


def _items_of(store: Store, run: dict[str, Any]) -> str:
    """The suite whose items a run scored: a derived suite's parent (same items), else its own."""
    derived = store.suite_spec(run["suite_id"]).get("derived_from")
    parent = derived.get("suite_id") if isinstance(derived, dict) else None
    return str(parent or run["suite_id"])


def _item_ids(store: Store, run: dict[str, Any]) -> frozenset[str]:
    return frozenset(
        str(r[0])
        for r in store.execute(
            "SELECT DISTINCT item_id FROM results WHERE run_id = ?", [run["run_id"]]
        ).fetchall()
    )


def compare_runs(
    store: Store | Sequence[Store], run_ids: list[str], *, all_items: bool = False
) -> dict[str, Any]:
    """Each run against the first: accuracies, paired difference (cluster bootstrap CI and
    p-value), McNemar when pairs are independent, disagreements.

    Runs that hold different item sets (a longer run against a limited one) are compared on
    the items every run holds: each run's accuracy then comes from those items too, so the
    per-run figures and the paired difference describe the same items (`items` in the output
    names each run's count and what was left out). `all_items`: each run's accuracy on all
    its own items instead (the paired difference is on the shared items either way).

    `store` may be several databases: runs are then looked up in each (see `resolve_runs`);
    runs from different files pair up when they score the same suite (same suite id, which is a
    hash of the suite's content).
    """
    if len(run_ids) < 2:
        raise CompareError("compare needs at least two runs")
    stores = [store] if isinstance(store, Store) else list(store)
    located = resolve_runs(stores, run_ids)
    runs = [run for run, _ in located]
    # a suite with other templates (`<suite>~<level>`, data/derived.py) has its parent's items:
    # its runs pair with the parent's and with other levels' item by item (and variant)
    suites = {_items_of(st, r) for r, st in located}
    if len(suites) > 1:
        raise CompareError(
            f"runs are on different suites ({', '.join(sorted(suites))}); compare needs one suite"
        )
    first = located[0][1]
    spec = first.suite_spec(runs[0]["suite_id"])
    cluster_field = (
        spec.get("cluster_field") if isinstance(spec.get("cluster_field"), str) else None
    )
    # Only what the paired comparison reads: the base columns and the cluster field.
    frames = [
        metric_frame(st, r, [cluster_field] if cluster_field else [], columns=())
        for r, st in located
    ]
    multi = len({str(st.path) for _, st in located}) > 1
    briefs = [_brief(r, str(st.path) if multi else None) for r, st in located]
    base, base_df = runs[0], frames[0]
    held = [_item_ids(st, r) for r, st in located]
    shared = frozenset.intersection(*held)
    differ = any(h != shared for h in held)
    on = shared if differ and not all_items else None
    out: dict[str, Any] = {
        "suite": base["suite_name"],
        "bootstrap": {
            "resamples": BOOTSTRAP.resamples,
            "seed": BOOTSTRAP.seed,
            "level": BOOTSTRAP.level,
        },
        "items": {
            "differ": differ,
            "shared": len(shared),
            "accuracy_on": "all items of each run" if on is None else "shared items",
            "runs": [
                {"run_id": r["run_id"], "n_items": len(h), "unshared": len(h - shared)}
                for (r, _), h in zip(located, held, strict=True)
            ],
        },
        "base": {**briefs[0], "accuracy": _accuracy(first, base, on)},
        "comparisons": [],
    }
    for (run, st), df, brief in zip(located[1:], frames[1:], briefs[1:], strict=True):
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
            mc = {
                "statistic": None,
                "p": None,
                "method": "not applicable: dependent pairs within clusters",
            }
        out["comparisons"].append(
            {
                "run": {**brief, "accuracy": _accuracy(st, run, on)},
                "n": c.n,
                "n_clusters": c.n_clusters,
                "acc_base": c.acc_a,
                "acc_run": c.acc_b,
                "diff": c.diff,
                "diff_ci95": [c.lo, c.hi],
                "p_value": c.p_value,
                "interval_method": c.interval_method,
                "mcnemar": {"b_base_only": b_only, "c_run_only": c_only, **mc},
                "disagreements": _records(
                    c.disagreements.reindex(
                        columns=[
                            "item_id",
                            "variant",
                            "correct_a",
                            "correct_b",
                            "prediction_a",
                            "prediction_b",
                            "gold_a",
                        ]
                    ).rename(
                        columns={
                            "correct_a": "correct_base",
                            "correct_b": "correct_run",
                            "prediction_a": "prediction_base",
                            "prediction_b": "prediction_run",
                            "gold_a": "gold",
                        }
                    )
                ),
            }
        )
    _holm(out["comparisons"], out)
    return out


HOLM_NAME = "Holm-adjusted p"


def _holm(comparisons: list[dict[str, Any]], out: dict[str, Any]) -> None:
    """With two or more comparisons reported together, each p-value's Holm adjustment over
    them (`p_holm`; `analysis/multiplicity.py`), the correction named in `out["correction"]`;
    with one, `p_holm` is None and so is the correction."""
    from llmscope.analysis.multiplicity import HOLM, holm

    ps = [c.get("p_value") for c in comparisons]
    m = sum(p is not None and p == p for p in ps)  # NaN != NaN: a missing p-value is not counted
    adjusted = holm(ps) if m > 1 else [None] * len(ps)
    for c, adj in zip(comparisons, adjusted, strict=True):
        c["p_holm"] = adj
    out["correction"] = {"name": HOLM_NAME, "method": HOLM, "family_size": m} if m > 1 else None


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts with None where a value is missing: a text column with some values holds
    NaN there (pandas' string dtype), which `--json` would print as NaN (not JSON)."""
    return [
        {str(k): v for k, v in r.items()}
        for r in df.astype(object).where(df.notna(), None).to_dict("records")
    ]


def _brief(run: dict[str, Any], db: str | None = None) -> dict[str, Any]:
    out = {"run_id": run["run_id"], "model": run.get("model"), "status": run.get("status")}
    if db is not None:
        out["db"] = db
    return out


def _label(brief: dict[str, Any]) -> str:
    return f"{brief['db']}:{brief['run_id']}" if brief.get("db") else str(brief["run_id"])


def _f(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _acc_text(a: dict[str, Any]) -> str:
    ci = a.get("ci95")
    ci_s = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
    return f"{a.get('metric')} {_f(a.get('value'), '.3f')}{ci_s} n={a.get('n')}"


def format_compare(out: dict[str, Any]) -> str:
    """Text table: one line per compared run, then its disagreeing items."""
    b = out["base"]
    bs = out["bootstrap"]
    lines = [
        f"suite {out['suite']}; base {_label(b)} ({b['model']}); paired cluster bootstrap "
        f"{bs['resamples']} resamples, seed {bs['seed']}"
    ]
    corr = out.get("correction")
    items = out.get("items") or {}
    if items.get("differ"):
        held = ", ".join(
            f"{r['run_id']} {r['n_items']}"
            + (f" ({r['unshared']} not shared)" if r["unshared"] else "")
            for r in items["runs"]
        )
        lines.append(
            f"item sets differ (items per run: {held}); compared on the {items['shared']} shared items; "
            f"each run's accuracy on {items['accuracy_on']}"
        )
    lines.append(f"  base {_label(b)}: {_acc_text(b['accuracy'])}")
    for c in out["comparisons"]:
        lines.append(f"  run  {_label(c['run'])}: {_acc_text(c['run']['accuracy'])}")
    if corr:
        lines.append(
            f"{corr['name']}: {corr['method']} over the {corr['family_size']} comparisons "
            "against the base (each run's p-value adjusted for the others reported with it)"
        )
    for c in out["comparisons"]:
        m = c["mcnemar"]
        lo, hi = c["diff_ci95"]
        mc = (
            f"McNemar b={m['b_base_only']} c={m['c_run_only']} p={format_p(m['p'])} ({m['method']})"
        )
        lines.append(
            f"  vs {_label(c['run'])} ({c['run']['model']}): n={c['n']} clusters={c['n_clusters']}  "
            f"acc {_f(c['acc_base'], '.3f')} → {_f(c['acc_run'], '.3f')}  diff {_f(c['diff'], '+.3f')} "
            f"[{_f(lo, '+.3f')}, {_f(hi, '+.3f')}] p={format_p(c['p_value'])}  {mc}"
        )
        if c.get("p_holm") is not None:
            lines.append(f"      {HOLM_NAME}={format_p(c['p_holm'])}")
        for d in c["disagreements"][:20]:
            lines.append(
                f"      {d['item_id']} / {d['variant']}: base {d['correct_base']:.0f}, run {d['correct_run']:.0f}"
            )
        if len(c["disagreements"]) > 20:
            lines.append(f"      ... {len(c['disagreements']) - 20} more (use --json)")
    return "\n".join(lines)


def compare_pairs(store: Store, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Several paired comparisons reported together (the TUI's study screen): each pair is
    `llmscope compare A B` (its `comparisons[0]`: run B against run A), and with more than one
    pair each p-value also gets its Holm adjustment over the pairs compared
    (`analysis/multiplicity.py`), the correction named in `correction`."""
    from llmscope.analysis.multiplicity import HOLM, holm

    out: list[dict[str, Any]] = []
    for a, b in pairs:
        try:
            res = compare_runs(store, [a, b])
        except CompareError as e:
            out.append({"a": a, "b": b, "error": str(e), "comparison": None})
            continue
        out.append(
            {
                "a": a,
                "b": b,
                "error": None,
                "comparison": res["comparisons"][0],
                "base": res["base"],
            }
        )
    ps = [c["comparison"]["p_value"] if c["comparison"] else None for c in out]
    m = sum(p is not None for p in ps)
    adjusted = holm(ps) if m > 1 else [None] * len(ps)
    for c, adj in zip(out, adjusted, strict=True):
        c["p_adjusted"] = adj
    return {
        "pairs": out,
        "correction": HOLM if m > 1 else None,
        "family_size": m,
        "bootstrap": {
            "resamples": BOOTSTRAP.resamples,
            "seed": BOOTSTRAP.seed,
            "level": BOOTSTRAP.level,
        },
    }
