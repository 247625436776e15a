"""Commonsense producers: consensus, awareness, commonsensicality and P(yes) vs human agreement."""

from __future__ import annotations

import pandas as pd

from ..metric_values import Metric
from ..metrics import MetricContext, register_producer, rows_to_metrics

__all__ = ["commonsense_metrics", "human_correlation_metrics", "human_agreement_pairs", "register"]


def commonsense_metrics(ctx: MetricContext) -> list[Metric]:
    """Consensus, awareness and commonsensicality against the human majority (`human_q1`)."""
    df = ctx.df
    if "f.human_q1" not in df or not {"q1", "q2"} <= set(df["variant"].astype(str)):
        return []
    from ..commonsense import commonsense_frame, commonsense_rows, commonsensicality

    ok = ctx.ok().copy()
    # Published binarised answers (`import commonsense-models`) store an answer and no
    # probabilities: the answer is the model's binarised answer, as P(yes) > P(no) is for a
    # probabilistic run, so it counts as P(yes) 1 or 0.
    p_yes = pd.to_numeric(ok["p_yes"], errors="coerce")
    p_no = pd.to_numeric(ok["p_no"], errors="coerce")
    pred = ok["prediction"].astype("string").str.lower() if "prediction" in ok else None
    if pred is not None and p_yes.isna().any():
        answered = p_yes.isna() & pred.isin(["yes", "no"]).fillna(False)
        p_yes = p_yes.mask(answered, (pred == "yes").astype(float))
        p_no = p_no.mask(answered, (pred == "no").astype(float))
    ok["p_yes"], ok["p_no"] = p_yes, p_no
    ok = ok[ok["p_yes"].notna()]
    cat = ok["f.category"] if "f.category" in ok else pd.Series([None] * len(ok), index=ok.index)
    human = pd.DataFrame({"id": ok["item_id"], "human_q1": ok["f.human_q1"], "category": cat})
    human = human.drop_duplicates("id")
    human = human[human["human_q1"].notna()]
    q = {
        v: ok[ok["variant"].astype(str) == v][["item_id", "p_yes", "p_no"]].rename(
            columns={"item_id": "id"}
        )
        for v in ("q1", "q2")
    }
    frame = commonsense_frame(human, q["q1"], q["q2"])
    if frame.empty:
        return []
    out: list[Metric] = []
    for by in ([], ["category"]):
        if by and frame["category"].isna().all():
            continue
        table = commonsensicality(
            frame, by, n_boot=ctx.bootstrap.resamples, seed=ctx.bootstrap.seed
        )
        rows = commonsense_rows(
            table, run=str(ctx.run.get("run_id")), model=str(ctx.run.get("model")), by=by
        )
        for m in rows_to_metrics(rows, "commonsense"):
            if by and m.group.get("category") == "(all)":
                continue
            # consensus and awareness carry Wilson intervals (analysis/commonsense.py), only
            # commonsensicality a bootstrap over statements
            m.interval_method = (
                "bootstrap over statements"
                if m.name == "commonsensicality"
                else "wilson (statements)"
            )
            out.append(m)
    return out


def human_correlation_metrics(ctx: MetricContext) -> list[Metric]:
    """Pearson and Spearman correlation of P(yes) (variant q1 when present) with `human_q1`."""
    if "f.human_q1" not in ctx.df:
        return []
    from ..commonsense import correlation

    pairs = human_agreement_pairs(ctx.ok())
    c = correlation(pairs["p_yes"], pairs["human"])
    return [
        Metric(f"human_{k}", c.get(k), n=int(c["n"]), producer="human_correlation")
        for k in ("pearson", "spearman")
    ]


def human_agreement_pairs(ok: pd.DataFrame) -> pd.DataFrame:
    """The (statement, P(yes), human agreement) pairs `human_pearson` / `human_spearman` are
    computed over: rows of variant q1 when present, one per item; columns item_id, p_yes, human
    (the figures plot these same pairs)."""
    if "error" in ok:
        ok = ok[ok["error"].isna()]
    if "q1" in set(ok["variant"].astype(str)):
        ok = ok[ok["variant"].astype(str) == "q1"]
    ok = ok.drop_duplicates("item_id")
    return pd.DataFrame({"item_id": ok["item_id"], "p_yes": ok["p_yes"], "human": ok["f.human_q1"]})


def register() -> None:
    """Add this family's producers to the pipeline, in report order (analysis/metrics.py calls it)."""
    register_producer(
        "commonsense", needs=lambda c: c.has("f.human_q1"), reads=("p_yes", "p_no", "prediction")
    )(commonsense_metrics)
    register_producer("human_correlation", needs=lambda c: c.has("f.human_q1"), reads=("p_yes",))(
        human_correlation_metrics
    )
