"""What the dashboard draws about one run (`Snapshot`), computed from the metrics pipeline.

Nothing here imports Textual, so it is tested and reused without a terminal. The rows come
from the store (`tui.data.store`) or the live channel (`tui.data.live`), gathered by
`tui.data.run_model.RunModel`; the screens call these functions from thread workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from llmscope.tui.data.fields import FLAG_KEY, is_nan, show_field, texts

if TYPE_CHECKING:
    from llmscope.tui.data.run_model import RunModel

MAX_GROUPS = 40


# -- snapshot --------------------------------------------------------------------------------
@dataclass
class Acc:
    label: str
    mean: float
    lo: float
    hi: float
    n: int


@dataclass
class Snapshot:
    """Everything the dashboard draws, computed off the UI thread."""

    version: int = 0
    n: int = 0
    n_errors: int = 0
    n_scored: int = 0
    overall: Acc | None = None
    variants: list[Acc] = field(default_factory=list)
    groups: dict[str, list[Acc]] = field(default_factory=dict)
    rel_bins: pd.DataFrame | None = None
    ece: float = float("nan")
    ece_raw: float = float("nan")
    mce: float = float("nan")
    brier: float = float("nan")
    yesno: pd.DataFrame | None = None  # yesno_summary per variant
    other_mean: float = float("nan")
    other_hist: pd.DataFrame | None = None
    off_format: float = float("nan")
    human_hist: dict[str, list[int]] | None = (
        None  # "agree"/"disagree" -> counts of model P(yes) bins
    )
    human_stats: dict[str, Any] | None = None
    worldsense: pd.DataFrame | None = None  # problemname, acc, acc_ci, bias, bias_ci
    brier_yes: float = float("nan")
    accuracy_name: str = "accuracy"
    metrics: Any = None  # the pipeline's RunMetrics these numbers come from
    failing: dict[str, list[Any]] = field(default_factory=dict)
    group_values: list[str] = field(default_factory=list)
    pending: bool = False  # the first frame: counts only, the numbers are being computed
    sg: list[Acc] = field(default_factory=list)  # SyntaxGym: sg_score per suite
    sg_overall: Acc | None = None  # sg_score overall (mean over suites)
    group_field: str | None = None  # the suite's first group_by field (the list's group column)


# light rows do not carry, and the dashboard does not show them).
DASHBOARD_PRODUCERS = (
    "accuracy",
    "yesno",
    "calibration",
    "commonsense",
    "human_correlation",
    "worldsense",
    "syntaxgym",
)
# A stored run also gets these (they read whole stored rows; the dashboard lists their overall
# numbers under "more metrics", the same values `llmscope report` prints).
STORED_RUN_PRODUCERS = ("contamination", "genmetrics", "probeval")


def reads_whole_items(task: str | None) -> bool:
    """Whether a producer the dashboard runs for ``task`` (the task class's declared
    ``metric_producers``, engine/tasks) reads the items' whole fields, not single columns."""
    from llmscope.analysis.metrics import PRODUCERS
    from llmscope.engine.tasks.registry import TASKS

    cls = TASKS.get(task) if isinstance(task, str) else None
    declared = set(getattr(cls, "metric_producers", ())) & set(DASHBOARD_PRODUCERS)
    return any(p.whole_items and p.name in declared for p in PRODUCERS)


def pipeline_frame(model: RunModel, df: pd.DataFrame) -> pd.DataFrame:
    """The light rows with the item fields the pipeline needs as ``f.<name>`` columns."""
    from llmscope.analysis.metrics import PIPELINE_FIELDS

    out = df.copy()
    names = [
        *model.group_by,
        *([model.cluster_field] if model.cluster_field else []),
        # all but `clusters`, which only probeval reads: a stored run's producer, not run here
        *(f for f in PIPELINE_FIELDS if f != "clusters"),
    ]
    for f in dict.fromkeys(names):
        vals = pd.Series(model.item_values(out["item_id"], f), index=out.index, dtype=object)
        if vals.notna().any():
            out[f"f.{f}"] = vals
    if reads_whole_items(model.task):  # e.g. the SG producer reads whole items (their suite)
        out["fields"] = pd.Series(
            model.item_values(out["item_id"], "fields", key="item"), index=out.index, dtype=object
        )
    out["run_id"] = model.run_id
    return out


def _acc_of(m: Any, label: str) -> Acc | None:
    if m is None or m.value is None:
        return None
    lo = float("nan") if m.lo is None else float(m.lo)
    hi = float("nan") if m.hi is None else float(m.hi)
    return Acc(label, float(m.value), lo, hi, int(m.n or 0))


def compute_snapshot(model: RunModel, df: pd.DataFrame) -> Snapshot:
    """What the dashboard draws: every number from the metrics pipeline (`analysis.metrics`)."""
    from llmscope.analysis.metrics import compute_metrics

    snap = Snapshot(n=len(df))
    if df.empty:
        return snap
    err = df["error"].notna().to_numpy()
    snap.n_errors = int(err.sum())
    correct = pd.to_numeric(df["correct"], errors="coerce").to_numpy(float)
    ok = ~err & np.isfinite(correct)
    snap.n_scored = int(ok.sum())
    dbm = model.db_metrics
    if dbm is not None and dbm[0] == model.version:
        rm = dbm[1]
    else:
        rm = compute_metrics(
            pipeline_frame(model, df), model.run, model.spec, producers=DASHBOARD_PRODUCERS
        )
    fill_from_metrics(snap, rm, model.group_by)
    conf = pd.to_numeric(df["confidence"], errors="coerce").to_numpy(float)[ok]
    fill_reliability(snap, conf, correct[ok])
    other = pd.to_numeric(df["other"], errors="coerce").to_numpy(float)[~err]
    fill_other(snap, rm, other)
    if model.has_human:
        fill_human_hist(df, err, snap)
        fill_human_stats(snap, rm)
    _failing(model, df, err, correct, snap)
    return snap


def _val(rm: Any, name: str) -> float:
    m = rm.get(name)
    return float("nan") if m is None or m.value is None else float(m.value)


def fill_from_metrics(snap: Snapshot, rm: Any, group_by: list[str]) -> None:
    """The numbers the pipeline's `RunMetrics` gives the dashboard (accuracy, calibration,
    yes/no, WorldSense and SG tables): the same for a streaming and a stored run."""
    snap.metrics = rm
    acc_name = "item_accuracy" if rm.get("item_accuracy") is not None else "accuracy"
    snap.accuracy_name = acc_name
    snap.overall = _acc_of(rm.get(acc_name), "overall")
    snap.variants = [
        a for m in rm.by_group(acc_name, "variant") if (a := _acc_of(m, str(m.group["variant"])))
    ]
    for g in group_by:
        accs = [
            a for m in rm.by_group(acc_name, g)[:MAX_GROUPS] if (a := _acc_of(m, str(m.group[g])))
        ]
        if accs:
            snap.groups[g] = accs
    snap.ece, snap.mce, snap.brier, snap.brier_yes = (
        _val(rm, n) for n in ("ece", "mce", "brier", "brier_yes")
    )
    snap.ece_raw = _val(rm, "ece_raw")
    _yesno_table(rm, snap)
    snap.worldsense = _worldsense_table(rm)  # None unless the WorldSense producer reported
    sg = rm.get("sg_score")
    if (
        sg is not None
    ):  # SyntaxGym: the pipeline's SG scores (per suite Wilson, overall stratified bootstrap)
        snap.sg_overall = _acc_of(sg, "overall")
        snap.sg = [
            a
            for m in rm.metrics
            if m.name == "sg_score" and len(m.group) == 1
            if (a := _acc_of(m, str(next(iter(m.group.values())))))
        ]


def fill_reliability(snap: Snapshot, conf: np.ndarray, correct: np.ndarray) -> None:
    """The diagram's bins over the scored rows (ECE/MCE are the pipeline's numbers for them)."""
    from llmscope.analysis.calibration import reliability

    if np.isfinite(conf).any():
        snap.rel_bins = reliability(conf, correct, n_bins=10).bins


def fill_other(snap: Snapshot, rm: Any, other: np.ndarray) -> None:
    """P(other) histogram of the answered rows, when the pipeline reports P(other) (yes/no)."""
    from llmscope.analysis.yesno import other_histogram

    other = other[np.isfinite(other)]
    if len(other) and rm.get("mean_p_other") is not None:
        snap.other_mean = _val(rm, "mean_p_other")
        snap.off_format = _val(rm, "off_format_rate")
        snap.other_hist = other_histogram(other, bins=10)


def fill_human_stats(snap: Snapshot, rm: Any) -> None:
    """The human-agreement numbers the pipeline reports (consensus, awareness, correlations)."""
    hs: dict[str, Any] = {}
    for k in ("consensus", "awareness", "commonsensicality"):
        m = rm.get(k)
        if m is not None:
            hs[k], hs[f"{k}_lo"], hs[f"{k}_hi"] = m.value, m.lo, m.hi
    hs["pearson"], hs["spearman"] = _val(rm, "human_pearson"), _val(rm, "human_spearman")
    snap.human_stats = hs


def _yesno_table(rm: Any, snap: Snapshot) -> None:
    names = ("mean_p_yes", "pred_yes_rate", "gold_yes_rate", "yes_bias")
    groups: list[dict[str, Any]] = [{}] + [m.group for m in rm.by_group("mean_p_yes", "variant")]
    recs = []
    for g in groups:
        if rm.get("mean_p_yes", g) is None:
            continue
        rec: dict[str, Any] = {"variant": g.get("variant", "all")}
        for n in names:
            m = rm.get(n, g)
            rec[n] = None if m is None else m.value
            rec[n + "_ci"] = None if m is None else m.ci95
        recs.append(rec)
    snap.yesno = pd.DataFrame(recs) if recs else None


def fill_human_hist(df: pd.DataFrame, err: np.ndarray, snap: Snapshot) -> None:
    """The P(yes) histograms split by the human majority (drawn, not a metric)."""
    sub = df[~err].copy()
    if "human" not in sub or pd.to_numeric(sub["human"], errors="coerce").isna().all():
        return
    sub["variant"] = sub["variant"].astype(str)
    q1 = sub[sub["variant"] == "q1"] if "q1" in set(sub["variant"]) else sub
    py = pd.to_numeric(q1["p_yes"], errors="coerce").to_numpy(float)
    hum = pd.to_numeric(q1["human"], errors="coerce").to_numpy(float)
    fin = np.isfinite(py) & np.isfinite(hum)
    from llmscope.analysis.calibration import uniform_bin

    def hist(x: np.ndarray) -> list[int]:
        return np.bincount(uniform_bin(x, 10), minlength=10).tolist()

    snap.human_hist = {
        "humans agree": hist(py[fin & (hum >= 0.5)]),
        "humans disagree": hist(py[fin & (hum < 0.5)]),
    }


def _worldsense_table(rm: Any) -> pd.DataFrame | None:
    recs = []
    for m in rm.by_group("worldsense_accuracy", "problemname"):
        b = rm.get("worldsense_bias", m.group)
        recs.append(
            {
                "problemname": m.group["problemname"],
                "acc": m.value,
                "acc_ci": None if m.hi is None else m.hi - m.value,
                "bias": None if b is None else b.value,
                "bias_ci": None if b is None or b.hi is None else b.hi - b.value,
            }
        )
    return pd.DataFrame(recs) if recs else None


FAIL_COLS = [
    "item_id",
    "variant",
    "group",
    "gold",
    "prediction",
    "confidence",
    "distance",
    "error",
    "text",
    "seq",
]


def _failing(
    model: RunModel, df: pd.DataFrame, err: np.ndarray, correct: np.ndarray, snap: Snapshot
) -> None:
    # Every row, with its scope marks: the list shows the failing ones unless asked otherwise.
    wrong = err | (np.isfinite(correct) & (correct < 0.5))
    sub = df
    g0 = f"g.{model.group_by[0]}" if model.group_by else None
    # an item without the field: "None", as the paged list's SQL labels it (astype(str) alone
    # keeps it missing, NaN, in pandas' string dtype: shown "-" and sorted apart)
    group = (
        sub[g0].astype(object).where(sub[g0].notna(), "None").astype(str)
        if g0 and g0 in sub
        else pd.Series([""] * len(sub), index=sub.index)
    )
    if "human" in sub:
        from llmscope.analysis.yesno import human_distance

        dist = pd.Series(
            human_distance(sub["p_yes"], sub["p_no"] if "p_no" in sub else np.nan, sub["human"]),
            index=sub.index,
        )
    else:
        dist = pd.Series([np.nan] * len(sub), index=sub.index)
    text = pd.Series(model.item_values(sub["item_id"], "text", key="item"), index=sub.index).fillna(
        ""
    )
    snap.failing = {
        "item_id": sub["item_id"].astype(str).tolist(),
        "variant": sub["variant"].astype(str).tolist(),
        "group": group.tolist(),
        # None, not NaN, where a row has no text (pandas' string dtype holds NaN): the list
        # styles a row with a truthy error red and would print "nan"
        "gold": texts(sub["gold"]),
        "prediction": texts(sub["prediction"]),
        "confidence": pd.to_numeric(sub["confidence"], errors="coerce").fillna(np.nan).tolist(),
        "distance": dist.astype(float).tolist(),
        "error": texts(sub["error"]),
        "text": text.tolist(),
        "seq": pd.to_numeric(sub["seq"], errors="coerce").fillna(-1).astype(int).tolist(),
        "failing": wrong.tolist(),
    }
    if FLAG_KEY in sub:
        snap.failing["flagged"] = [v is True or v == 1 or v == "true" for v in sub[FLAG_KEY]]
    for f in model.fields:
        vals = sub[f.key] if f.key in sub else pd.Series([None] * len(sub), index=sub.index)
        snap.failing[f.key] = [show_field(None if is_nan(v) else v, f.kind) for v in vals]
    if g0 and g0 in df:
        snap.group_values = sorted({str(v) for v in df[g0].dropna()})[:200]
