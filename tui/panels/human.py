"""Human vs model, side by side, for every suite with human data (`h` on the dashboard;
the item drill-down shows the item's own comparison).

Kinds of human data (`human_kind`):
- agreement: commonsense statements, `human_q1` = share of people who agree; beside the
  model's P(yes). The correlation shown is the pipeline's `human_pearson` / `human_spearman`.
- counts: choice items with human choice counts (`human_counts_field` of the spec); beside
  the model's option probabilities. Fit numbers (`fit_alpha`, `human_loglik`, ...) are the
  pipeline's rows (analysis/methods.py).
- clusters: CFC / ProtoQA questions with clustered human answers; beside the model's
  sampled answers matched to those clusters (ProbEval). KL is the pipeline's `probeval_kl`;
  the per-question tables are the ones `llmscope report` stores in the `analyses` table.
- rating: rating items whose gold is a human rating; the human rating histogram beside the
  model's predicted rating distribution.

This module computes no number: the share of items whose model argmax equals the human
majority choice (`human_majority_agreement`), the mean total-variation distance
(`human_tv_distance`) and the rating histograms (`human_rating_share`, `model_rating_share`)
are pipeline metrics (analysis/human.py), as `llmscope report` prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from llmscope.analysis.human import field_value as _value
from llmscope.analysis.human import finite_float as _num
from llmscope.analysis.human import human_counts
from llmscope.analysis.metric_values import RunMetrics
from llmscope.analysis.metrics import display
from llmscope.analysis.yesno import human_distance
from llmscope.engine.tasks.registry import task_has
from llmscope.tui.widgets import Plot, bar, fmt, literal, plain_table

if TYPE_CHECKING:
    from llmscope.tui.app import LlmscopeApp
    from llmscope.tui.data.run_model import RunModel

__all__ = [
    "HumanData",
    "HumanScreen",
    "human_data",
    "human_data_live",
    "human_kind",
    "rating_table",
    "render_human_item",
    "render_human_summary",
]

KINDS = ("agreement", "counts", "clusters", "rating")


def human_kind(fields: dict[str, Any], spec: dict[str, Any], task: str | None) -> str | None:
    """Which human data an item carries (see the module doc), or None."""
    if _num(fields.get("human_q1")) is not None:
        return "agreement"
    hc = spec.get("human_counts_field")
    if isinstance(hc, str) and isinstance(_value(fields.get(hc)), list):
        return "counts"
    if "clusters" in fields and "raw" in fields:
        return "clusters"
    if (
        task_has(task, "human_ratings")
        and _num(fields.get(spec.get("gold_field") or "gold")) is not None
    ):
        return "rating"
    return None


# -- data ------------------------------------------------------------------------------------
@dataclass
class HumanData:
    """What the human-vs-model views draw for one run."""

    kind: str | None
    run: dict[str, Any]
    metrics: list[dict[str, Any]] = field(
        default_factory=list
    )  # pipeline rows about humans (overall)
    agreement: pd.DataFrame | None = None  # item_id, text, human, p_yes
    choices: pd.DataFrame | None = (
        None  # item_id, text, options, human (shares), model (probs), tv, agree
    )
    rating: pd.DataFrame | None = (
        None  # label, human, model (the pipeline's shares), n_human, n_model
    )
    probeval: dict[str, Any] | None = None  # the stored analysis (per question tables)
    texts: dict[str, str] = field(default_factory=dict)
    live_rows: int | None = None  # a live run: the rows received so far (None: the stored run)


HUMAN_METRICS = (
    "consensus",
    "awareness",
    "commonsensicality",
    "human_pearson",
    "human_spearman",
    "probeval_kl",
    "probeval_wrong_share",
    "human_majority_agreement",
    "human_tv_distance",
    "fit_alpha",
    "human_loglik",
    "human_ll_uniform",
    "human_ll_empirical",
    "human_ll_per_choice",
    "softmax_accuracy_fitted",
)


@dataclass(eq=False)
class HumanLoaded(Message):
    """What the screen's worker loaded, applied on the UI thread."""

    data: HumanData


def human_data(store: Any, run: dict[str, Any]) -> HumanData:
    """Everything the human views draw, read from the store: every number is the pipeline's
    (`run_metrics`); the per-item rows and the ProbEval tables are the analysis layer's."""
    from llmscope.analysis.metrics import results_with_fields, run_metrics
    from llmscope.tui.data.store import load_items

    spec = store.suite_spec(run["suite_id"]) or {}
    items = load_items(store, run["suite_id"])
    out = _empty(run, spec, items)
    if out.kind is None:
        return out
    rm = run_metrics(store, run)
    if out.kind == "clusters":
        out.metrics = _human_rows(rm)
        # The per-question tables `llmscope report` stores; computed (and stored) once when missing.
        out.probeval = store.load_analysis(run["run_id"], "probeval")
        if out.probeval is None:
            from llmscope.report import probeval_for_run

            res = probeval_for_run(store, run, save=not getattr(store, "read_only", False))
            out.probeval = (
                store.load_analysis(run["run_id"], "probeval") if res is not None else None
            )
            if out.probeval is None and res is not None:  # read-only: the same payload, not stored
                out.probeval = {
                    "questions": {
                        q: {
                            "kl": sc.kl,
                            "n_model": sc.n_model,
                            "n_wrong": sc.n_wrong,
                            "table": sc.table.to_dict("records"),
                        }
                        for q, sc in res.scores.items()
                    }
                }
        return out
    df = (
        results_with_fields(store, run["run_id"])
        if out.kind in ("agreement", "counts")
        else pd.DataFrame()
    )
    return _fill(out, rm, df, spec)


# What the live view runs: the producers of the numbers it shows (cheap on the rows so far).
LIVE_PRODUCERS = ("commonsense", "human_correlation", "human_choice", "human_rating")


def human_data_live(model: RunModel) -> HumanData:
    """The same views for a run still being written (`h` on a live dashboard): the pipeline's
    producers on the rows received so far (the dashboard's RunModel), no database read.
    ProbEval's per-question tables need the stored run and are shown once it has ended."""
    from llmscope.analysis.metrics import compute_metrics
    from llmscope.tui.data.snapshot import pipeline_frame

    out = _empty(model.run, model.spec, model.items)
    out.live_rows = len(model.frame())
    if out.kind is None or out.kind == "clusters" or out.live_rows == 0:
        return out
    df = model.frame()
    f = pipeline_frame(model, df)
    ids = f["item_id"]
    for name in ("fields", "options", "text"):  # whole items, as the stored frame has them
        f[name] = pd.Series(model.item_values(ids, name, key="item"), index=f.index, dtype=object)
    if "f.human_q1" not in f:
        f["f.human_q1"] = pd.Series(model.item_values(ids, "human_q1"), index=f.index, dtype=object)
    rm = compute_metrics(f, model.run, model.spec, producers=LIVE_PRODUCERS)
    return _fill(out, rm, f, model.spec)


def _empty(
    run: dict[str, Any], spec: dict[str, Any], items: dict[str, dict[str, Any]]
) -> HumanData:
    kind = next(
        (
            k
            for it in list(items.values())[:50]
            if (k := human_kind(it.get("fields") or {}, spec, run.get("task")))
        ),
        None,
    )
    return HumanData(kind, run, texts={i: str(it.get("text") or "") for i, it in items.items()})


def _human_rows(rm: RunMetrics) -> list[dict[str, Any]]:
    return [r for r in rm.rows() if r["metric"] in HUMAN_METRICS and not r.get("group")]


def _fill(out: HumanData, rm: RunMetrics, df: pd.DataFrame, spec: dict[str, Any]) -> HumanData:
    """The pipeline's numbers and the per-item rows to draw, from ``df`` (rows with ``f.``
    fields and the items' ``fields`` / ``options``)."""
    from llmscope.analysis.human import choice_frame

    out.metrics = _human_rows(rm)
    out.rating = rating_table(rm)
    df = df[df["error"].isna()] if "error" in df else df
    if out.kind == "agreement" and len(df):
        q = (
            df[df["variant"].astype(str) == "q1"]
            if (df["variant"].astype(str) == "q1").any()
            else df
        )
        out.agreement = (
            pd.DataFrame(
                {
                    "item_id": q["item_id"].astype(str),
                    "text": q["item_id"].astype(str).map(out.texts),
                    "human": pd.to_numeric(q["f.human_q1"], errors="coerce"),
                    "p_yes": pd.to_numeric(q["p_yes"], errors="coerce"),
                    "p_no": pd.to_numeric(q["p_no"], errors="coerce") if "p_no" in q else np.nan,
                }
            )
            .dropna(subset=["human", "p_yes"])
            .reset_index(drop=True)
        )
    elif out.kind == "counts" and len(df):
        c = choice_frame(df, spec).reset_index(drop=True)
        c.insert(2, "text", c["item_id"].map(out.texts).fillna(""))
        out.choices = c
    return out


def rating_table(rm: RunMetrics) -> pd.DataFrame | None:
    """The pipeline's rating histograms (``human_rating_share``, ``model_rating_share`` per
    rating label) as one table to draw, or None when the run has none."""
    human = {str(m.group["rating"]): m for m in rm.by_group("human_rating_share", "rating")}
    if not human:
        return None
    model = {str(m.group["rating"]): m for m in rm.by_group("model_rating_share", "rating")}
    labels = list(human)
    return pd.DataFrame(
        {
            "label": labels,
            "human": [human[k].value for k in labels],
            "model": [model[k].value if k in model else None for k in labels],
            "n_human": [human[k].n for k in labels],
            "n_model": [model[k].n if k in model else None for k in labels],
        }
    )


# -- rendering -------------------------------------------------------------------------------
def _metric_line(rows: list[dict[str, Any]]) -> Text:
    t = Text()
    for r in rows:
        t.append(f"{r['metric']} ", style="bold")
        t.append(display(r["metric"], r["value"]))
        if r.get("ci95"):
            lo, hi = r["ci95"]
            t.append(f" [{display(r['metric'], lo)}, {display(r['metric'], hi)}]", style="dim")
        t.append("   ")
    return t


def render_human_summary(d: HumanData) -> Any:
    """The dashboard's human panel: a few numbers for the run (details: `h`)."""
    if d.kind is None:
        return Text("no human judgements in this suite", style="dim")
    parts: list[Any] = [Text(f"human vs model ({d.kind}; h: side by side)", style="bold")]
    if d.live_rows is not None:
        parts.append(
            Text(
                f"live: the {d.live_rows} rows received so far, recomputed every "
                f"{HumanScreen.LIVE_REFRESH_S:g} s",
                style="dim",
            )
        )
    if d.metrics:
        parts.append(_metric_line(d.metrics))
    if d.choices is not None and len(d.choices):
        parts.append(
            Text(
                f"items {d.choices['item_id'].nunique()}; TV: total-variation distance, "
                "human choice shares vs model probabilities",
                style="dim",
            )
        )
    if d.rating is not None and len(d.rating):
        parts.append(_rating_table(d.rating))
    if d.kind == "clusters" and d.probeval is None:
        parts.append(
            Text(
                "ProbEval tables not computed yet (llmscope report computes them"
                + ("; shown once the run has ended)" if d.live_rows is not None else ")"),
                style="dim",
            )
        )
    return Group(*parts)


def _rating_table(r: pd.DataFrame) -> Table:
    t = plain_table(
        title=f"ratings: human_rating_share (n={r['n_human'].iloc[0]}) vs model_rating_share "
        f"(n={r['n_model'].iloc[0]})",
    )
    t.add_column("rating")
    t.add_column("human", no_wrap=True)
    t.add_column("model", no_wrap=True)
    top = max(1e-9, float(r["human"].max()), float(pd.to_numeric(r["model"]).max()))
    for rec in r.to_dict("records"):
        t.add_row(
            literal(rec["label"]),
            f"{bar(rec['human'] / top, 12)} {display('human_rating_share', rec['human'])}",
            f"{bar((rec['model'] or 0.0) / top, 12)} {display('model_rating_share', rec['model'])}",
        )
    return t


def _cluster_table(q: dict[str, Any], width: int = 16) -> Table:
    t = Table(box=None, padding=(0, 1), header_style="bold")
    t.add_column("cluster", no_wrap=True)
    t.add_column("human", no_wrap=True)
    t.add_column("model", no_wrap=True)
    for row in q.get("table") or []:
        t.add_row(
            literal(row.get("cluster")),
            f"{bar(row.get('human_p'), width)} {fmt(row.get('human_p'), 2)} ({row.get('human_count')})",
            f"{bar(row.get('model_p'), width)} {fmt(row.get('model_p'), 2)} ({fmt(row.get('model_count'), 1)})",
        )
    return t


def render_human_item(
    first: dict[str, Any],
    details: list[dict[str, Any]],
    spec: dict[str, Any] | None = None,
    task: str | None = None,
    probeval: dict[str, Any] | None = None,
) -> list[Any]:
    """The drill-down's human section: this item's human data beside each run's model answer."""
    fields = first.get("fields") or {}
    spec = spec or {}
    kind = human_kind(fields, spec, task)
    out: list[Any] = []
    if kind is None:
        return out
    out.append(Text("human vs model", style="bold underline"))
    if kind == "agreement":
        h = _num(fields.get("human_q1")) or 0.0
        t = Table(box=None, padding=(0, 1), show_header=False)
        t.add_column(no_wrap=True)
        t.add_column(no_wrap=True)
        t.add_row("humans agree (human_q1)", f"{bar(h, 20)} {h:.2f}")
        for d in details:
            for v in d.get("variants") or []:
                probs = v.get("probs") if isinstance(v.get("probs"), dict) else {}
                py = _num(v.get("p_yes")) if v.get("p_yes") is not None else _num(probs.get("yes"))
                pn = _num(v.get("p_no")) if v.get("p_no") is not None else _num(probs.get("no"))
                if py is not None:
                    who = f"model P(yes) {v.get('variant')}" + (
                        f" [{d.get('run_id')}]" if len(details) > 1 else ""
                    )
                    # |m-h| with P(yes) renormalised over yes/no (analysis.yesno.human_distance)
                    dist = float(human_distance([py], [pn if pn is not None else np.nan], [h])[0])
                    t.add_row(literal(who), f"{bar(py, 20)} {py:.2f}   |m-h| {dist:.2f}")
        out.append(t)
    elif kind == "counts":
        counts = human_counts(fields, spec) or []
        opts = first.get("options") or []
        tot = sum(counts) or 1.0
        t = Table(box=None, padding=(0, 1), header_style="bold")
        t.add_column("option", max_width=40)
        t.add_column(f"humans (n={int(tot)})", no_wrap=True)
        heads = []
        for d in details:
            for v in d.get("variants") or []:
                heads.append((d, v))
                t.add_column(
                    f"model {v.get('variant')}"
                    + (f" {str(d.get('run_id'))[:8]}" if len(details) > 1 else ""),
                    no_wrap=True,
                )
        for i, o in enumerate(opts):
            h = counts[i] / tot if i < len(counts) else float("nan")
            cells = [f"{bar(h, 12)} {h:.2f} ({int(counts[i]) if i < len(counts) else '-'})"]
            for _d, v in heads:
                probs = v.get("probs") if isinstance(v.get("probs"), dict) else {}
                p = _num(probs.get(str(o)))
                cells.append(f"{bar(p, 12)} {fmt(p, 2)}")
            t.add_row(literal(o), *cells)
        out.append(t)
    elif kind == "rating":
        g = fields.get(spec.get("gold_field") or "gold")
        out.append(Text.assemble(("human rating ", "bold"), literal(g)))
        for d in details:
            for v in d.get("variants") or []:
                probs = v.get("probs") if isinstance(v.get("probs"), dict) else {}
                t = Table(
                    box=None,
                    padding=(0, 1),
                    show_header=False,
                    title=f"model rating distribution ({v.get('variant')})",
                    title_justify="left",
                )
                t.add_column(no_wrap=True)
                t.add_column(no_wrap=True)
                for k, p in probs.items():
                    mark = (
                        "  ← human"
                        if _num(k) is not None
                        and _num(g) is not None
                        and abs(float(_num(k) or 0) - float(_num(g) or 0)) < 0.5
                        else ""
                    )
                    t.add_row(literal(k), f"{bar(_num(p), 20)} {fmt(p, 2)}{mark}")
                ex = v.get("extra") if isinstance(v.get("extra"), dict) else {}
                if ex.get("expected") is not None:
                    t.add_row(
                        "expected",
                        f"{fmt(ex.get('expected'), 2)}   |expected − human| {fmt(ex.get('abs_error'), 2)}",
                    )
                out.append(t)
    elif kind == "clusters":
        q = ((probeval or {}).get("questions") or {}).get(str(first.get("item_id")))
        if q is None:
            out.append(
                Text(
                    "no ProbEval table for this question yet (`llmscope report` stores it)",
                    style="dim",
                )
            )
        else:
            out.append(
                Text(
                    f"ProbEval KL(human || model) {fmt(q.get('kl'))}   model samples {q.get('n_model')}"
                    f"   matched to no cluster {q.get('n_wrong')}"
                )
            )
            out.append(_cluster_table(q))
        clusters = _value(fields.get("clusters"))
        if isinstance(clusters, dict):
            t = plain_table(
                title="human clusters: answers",
            )
            t.add_column("cluster", no_wrap=True)
            t.add_column("answers")
            for k, c in list(clusters.items())[:12]:
                answers = c.get("answers", []) if isinstance(c, dict) else c
                t.add_row(literal(k), literal(", ".join(map(str, answers))[:300]))
            out.append(t)
        for d in details:
            for v in d.get("variants") or []:
                ex = v.get("extra") if isinstance(v.get("extra"), dict) else {}
                samples = [
                    s.get("text") if isinstance(s, dict) else s for s in ex.get("samples") or []
                ]
                if samples:
                    out.append(
                        Text.assemble(
                            ("model answers ", "bold"), literal(" | ".join(map(str, samples))[:600])
                        )
                    )
    return out


# -- screen ----------------------------------------------------------------------------------
class HumanScatter(Plot):
    """Human agreement against the model's P(yes), one dot per statement."""

    def show(self, d: HumanData) -> None:
        a = d.agreement
        r = {m["metric"]: m["value"] for m in d.metrics}
        # the pipeline's numbers under the report's names and precision
        title = (
            f"P(yes) vs humans: human_pearson {display('human_pearson', r.get('human_pearson'))}"
            f" human_spearman {display('human_spearman', r.get('human_spearman'))}"
        )
        with self.drawing(title) as plt:
            self.unit_axes()
            if a is not None and len(a):
                plt.scatter(a["human"].tolist(), a["p_yes"].tolist(), marker="dot", color="cyan")
            plt.xlabel("human agreement")


class RatingBars(Plot):
    """Human rating histogram beside the model's predicted rating histogram."""

    def show(self, d: HumanData) -> None:
        r = d.rating
        with self.drawing("ratings: human (gold) vs model (prediction)"):
            # a rating the model never predicted: a bar of 0
            self.frame_bars(
                None if r is None else r.assign(model=r["model"].fillna(0.0)), "human", "model"
            )


class HumanScreen(Screen[None]):
    """Human vs model for one run: the plot and the items, largest disagreement first."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]
    DEFAULT_CSS = """
    HumanScreen #human-top { height: 1fr; min-height: 12; }
    HumanScreen PlotextPlot { width: 1fr; border: round $primary; }
    HumanScreen #human-nums { width: 1fr; height: auto; }
    HumanScreen #human-items { height: 1fr; }
    """
    MAX_ROWS = 200
    LIVE_REFRESH_S = 2.0  # a live run: the pipeline reruns on the rows so far at most this often

    def __init__(self, run_id: str, live: RunModel | None = None) -> None:
        super().__init__()
        self.run_id = run_id
        self.live = live  # the live dashboard's rows (a run another process is writing)
        self.data: HumanData | None = None

    @property
    def llm_app(self) -> LlmscopeApp:
        return cast("LlmscopeApp", self.app)

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="human-top"):
            yield HumanScatter(id="human-scatter")
            yield RatingBars(id="human-rating")
            yield Static("loading ...", id="human-nums")
        with VerticalScroll(id="human-items"):
            yield Static("", id="human-table")
        yield Footer()

    def on_mount(self) -> None:
        self.load()
        if self.live is not None:
            self.set_interval(self.LIVE_REFRESH_S, self.load)

    @work(thread=True, exclusive=True, exit_on_error=False, group="human")
    def load(self) -> None:
        if self.live is not None:
            self.post_message(HumanLoaded(human_data_live(self.live)))
            return
        with self.llm_app.handle.use() as store:
            run = store.get_run(self.run_id) or store.find_run(self.run_id)
            if run is None:
                raise ValueError(f"no run {self.run_id!r}")
            d = human_data(store, run)
        self.post_message(HumanLoaded(d))

    def on_human_loaded(self, msg: HumanLoaded) -> None:
        d = self.data = msg.data
        self.query_one(HumanScatter).display = d.kind == "agreement"
        self.query_one(RatingBars).display = d.kind == "rating"
        if d.kind == "agreement":
            self.query_one(HumanScatter).show(d)
        if d.kind == "rating":
            self.query_one(RatingBars).show(d)
        self.query_one("#human-nums", Static).update(render_human_summary(d))
        self.query_one("#human-table", Static).update(self._table(d))

    def _table(self, d: HumanData) -> Any:
        if d.agreement is not None and len(d.agreement):
            a = d.agreement.assign(
                dist=human_distance(
                    d.agreement["p_yes"], d.agreement.get("p_no", np.nan), d.agreement["human"]
                )
            )
            a = a.sort_values("dist", ascending=False, kind="stable").head(self.MAX_ROWS)
            t = plain_table(
                title=f"statements, farthest from humans first ({len(d.agreement)} in all); "
                "|m-h| = |P(yes)/(P(yes)+P(no)) - human|",
            )
            for name in ("item", "human", "P(yes)", "|m-h|", "statement"):
                t.add_column(name, no_wrap=name != "statement")
            for r in a.to_dict("records"):
                t.add_row(
                    literal(r["item_id"]),
                    f"{bar(r['human'], 10)} {r['human']:.2f}",
                    f"{bar(r['p_yes'], 10)} {r['p_yes']:.2f}",
                    f"{r['dist']:.2f}",
                    literal(r["text"]),
                )
            return t
        if d.choices is not None and len(d.choices):
            c = d.choices.sort_values("tv", ascending=False, kind="stable").head(self.MAX_ROWS)
            t = plain_table(
                title="items, largest human–model distance (TV) first",
            )
            for col in ("item", "variant", "TV", "same top", "humans", "model", "text"):
                t.add_column(col, no_wrap=col not in ("text",))
            for r in c.to_dict("records"):
                t.add_row(
                    literal(r["item_id"]),
                    literal(r["variant"]),
                    f"{r['tv']:.2f}",
                    "yes" if r["agree"] else "no",
                    " ".join(f"{x:.2f}" for x in r["human"]),
                    " ".join(f"{x:.2f}" for x in r["model"]),
                    literal(r["text"]),
                )
            return t
        if d.kind == "clusters" and d.probeval:
            qs = sorted(
                (d.probeval.get("questions") or {}).items(),
                key=lambda kv: -(kv[1].get("kl") or 0.0),
            )
            parts: list[Any] = [
                Text(
                    f"questions, largest KL first ({len(qs)}; embedding: "
                    f"{d.probeval.get('embedding')})",
                    style="bold",
                )
            ]
            for qid, q in qs[:40]:
                parts.append(
                    Text.assemble(
                        (f"\n{qid}  KL {fmt(q.get('kl'))}  ", "bold"), literal(d.texts.get(qid, ""))
                    )
                )
                parts.append(_cluster_table(q))
            return Group(*parts)
        return Text("")
