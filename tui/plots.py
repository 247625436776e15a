"""Plots of one run (`v` on the dashboard): accuracy and throughput over the run, a
reliability diagram per prompt variant (or scoring method), the minimal-pair score
distribution, and position bias for choice tasks.

Data come from the stored `results` rows or, while another process writes the run, from its
live channel (the same columns); `plot_data` turns either into a `PlotData`. The numbers are
the pipeline's where it has them (`analysis.calibration.reliability` for the bins); the
per-position shares and the over-time series are small producers here (the pipeline reports
only first/last position rates and no time series).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from llmscope.analysis.metrics import display
from llmscope.store.db import decode_json
from llmscope.tui.widgets import Plot

if TYPE_CHECKING:
    from llmscope.tui.app import LlmscopeApp

__all__ = ["PlotData", "PlotsScreen", "plot_data", "position_shares", "timeline"]

PLOT_COLUMNS = (
    "item_id",
    "variant",
    "seq",
    "prediction",
    "gold",
    "correct",
    "confidence",
    "option_scores",
    "extra",
    "error",
    "written_at",
)


def _json(v: Any) -> Any:
    return decode_json(v)  # text parsed (None when it does not parse); anything else as it is


@dataclass
class PlotData:
    """Everything the four plots draw."""

    n: int = 0
    # over the run: x = results so far; running accuracy; items/s per time bucket
    done: list[int] = field(default_factory=list)
    running_acc: list[float] = field(default_factory=list)
    rate_t: list[float] = field(default_factory=list)  # seconds since the first result
    rate: list[float] = field(default_factory=list)  # results per second in that bucket
    reliability: dict[str, pd.DataFrame] = field(default_factory=dict)  # variant/method -> bins
    minpair_diffs: list[float] = field(default_factory=list)  # logP(good) - max logP(bad)
    positions: pd.DataFrame | None = None  # position, label, chosen, gold (shares)
    # a stored run: its headline metric from the metrics pipeline (what the report leads with)
    headline: Any = None


@dataclass(eq=False)
class PlotsLoaded(Message):
    """What the screen's worker loaded, applied on the UI thread."""

    data: PlotData


def timeline(
    df: pd.DataFrame, buckets: int = 30
) -> tuple[list[int], list[float], list[float], list[float]]:
    """(results so far, running accuracy, bucket start s, results/s) in arrival order."""
    d = df.sort_values("seq") if "seq" in df else df
    c = pd.to_numeric(d["correct"], errors="coerce").to_numpy(float)
    ok = np.isfinite(c)
    cum_n = np.cumsum(ok)
    cum_c = np.cumsum(np.where(ok, c, 0.0))
    keep = cum_n > 0
    done = (np.arange(len(d)) + 1)[keep].tolist()
    acc = (cum_c[keep] / cum_n[keep]).tolist()
    t_s: list[float] = []
    rate: list[float] = []
    if "written_at" in d:
        t = pd.to_datetime(d["written_at"], errors="coerce").dropna()
        if len(t) >= 2:
            secs = (t - t.min()).dt.total_seconds().to_numpy(float)
            span = max(float(secs.max()), 1e-9)
            width = max(span / buckets, 1.0)  # a result's timestamp is its batch's: ≥ 1 s buckets
            counts = np.bincount((secs // width).astype(int))
            t_s = (np.arange(len(counts)) * width).tolist()
            rate = (counts / width).tolist()
    return done, acc, t_s, rate


def position_shares(df: pd.DataFrame) -> pd.DataFrame | None:
    """Per listed position (A, B, ...): share of predictions there and share of gold there."""
    rows = []
    for scores, pred, gold in zip(df["option_scores"], df["prediction"], df["gold"], strict=True):
        # a row without option scores or a prediction (an abstention) holds NaN beside the
        # others' text (pandas' string dtype), not None; NaN is truthy and not None
        sc = _json(scores)
        order = list(sc) if isinstance(sc, dict) else []
        if not order or pd.isna(pred):
            continue
        rows.append(
            (
                order.index(pred) if pred in order else -1,
                order.index(gold) if gold in order else -1,
                len(order),
            )
        )
    if not rows:
        return None
    k = max(r[2] for r in rows)
    chosen = np.bincount([r[0] for r in rows if r[0] >= 0], minlength=k)[:k]
    gold = np.bincount([r[1] for r in rows if r[1] >= 0], minlength=k)[:k]
    n = len(rows)
    return pd.DataFrame(
        {
            "position": range(k),
            "label": [chr(65 + i) if i < 26 else str(i + 1) for i in range(k)],
            "chosen": chosen / n,
            "gold": gold / n,
            "n": n,
        }
    )


def plot_data(df: pd.DataFrame, task: str | None) -> PlotData:
    """The four plots' data from result rows (stored or live-channel, same columns)."""
    from llmscope.analysis.calibration import reliability

    out = PlotData(n=len(df))
    if df.empty:
        return out
    ok = df[df["error"].isna()] if "error" in df else df
    out.done, out.running_acc, out.rate_t, out.rate = timeline(ok)
    extras = (
        ok["extra"].map(_json) if "extra" in ok else pd.Series([None] * len(ok), index=ok.index)
    )
    methods = [
        e.get("methods") if isinstance(e, dict) and isinstance(e.get("methods"), dict) else None
        for e in extras
    ]
    if any(methods):  # choice tasks with several scoring methods: one diagram per method
        names = list(dict.fromkeys(k for m in methods for k in (m or {})))
        for name in names:
            conf = [
                m[name].get("confidence") if m and isinstance(m.get(name), dict) else np.nan
                for m in methods
            ]
            corr = [
                m[name].get("correct") if m and isinstance(m.get(name), dict) else np.nan
                for m in methods
            ]
            conf = [np.nan if v is None else v for v in conf]
            corr = [np.nan if v is None else v for v in corr]
            b = reliability(np.asarray(conf, float), np.asarray(corr, float), n_bins=10).bins
            if len(b) and b["count"].sum() > 0:
                out.reliability[f"method {name}"] = b
    if not out.reliability:
        for v, sub in ok.groupby(ok["variant"].astype(str), sort=True):
            b = reliability(
                pd.to_numeric(sub["confidence"], errors="coerce"),
                pd.to_numeric(sub["correct"], errors="coerce"),
                n_bins=10,
            ).bins
            if len(b) and b["count"].sum() > 0:
                out.reliability[str(v)] = b
    out.minpair_diffs = [
        float(e["logprob_diff"])
        for e in extras
        if isinstance(e, dict)
        and isinstance(e.get("logprob_diff"), (int, float))
        and math.isfinite(float(e["logprob_diff"]))
    ]
    if _lists_options(task) and "option_scores" in ok:
        out.positions = position_shares(ok)
    return out


def _lists_options(task: str | None) -> bool:
    """Whether the task's items list options (`Task.needs_options`): the position-bias chart."""
    from llmscope.engine.tasks.registry import TASKS

    cls = TASKS.get(task) if isinstance(task, str) else None
    return bool(getattr(cls, "needs_options", False))


BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], lo: float | None = None, hi: float | None = None) -> str:
    """One character per value, ▁ (lo) to █ (hi); lo/hi default to the values' range."""
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return ""
    a = min(vals) if lo is None else lo
    b = max(vals) if hi is None else hi
    span = (b - a) or 1.0
    return "".join(
        BLOCKS[max(0, min(7, int((v - a) / span * 7 + 0.5)))] if math.isfinite(v) else " "
        for v in values
    )


class RunSparks:
    """Samples of a live run (one per dashboard refresh that adds results) for header sparklines."""

    def __init__(self, width: int = 20) -> None:
        self.width = width
        self.done: list[int] = []
        self.acc: list[float] = []
        self.rate: list[float] = []

    def add(self, done: int, acc: float | None, items_per_s: float) -> None:
        if self.done and done == self.done[-1]:
            return
        self.done.append(done)
        self.acc.append(math.nan if acc is None else acc)
        self.rate.append(items_per_s)
        for xs in (self.done, self.acc, self.rate):
            del xs[: -self.width]

    def text(self) -> Text:
        t = Text()
        if len(self.done) < 2:
            return t
        t.append("   acc ")
        t.append(sparkline(self.acc, 0.0, 1.0), style="cyan")
        t.append("  items/s ")
        t.append(sparkline(self.rate, 0.0), style="magenta")
        return t


# -- widgets ---------------------------------------------------------------------------------
COLORS = ("cyan", "magenta", "green", "orange", "blue", "red", "yellow")


class TimelinePlot(Plot):
    """Running accuracy against results so far, and results per second over time."""

    def show(self, d: PlotData) -> None:
        with self.drawing("accuracy so far (left) · results/s (right)") as plt:
            if d.done:
                plt.plot(d.done, d.running_acc, marker="braille", color="cyan", label="accuracy")
                plt.ylim(0, 1)
            if d.rate:
                # a second axis: throughput against seconds since the first result
                plt.plot(
                    d.rate_t,
                    d.rate,
                    marker="braille",
                    color="magenta",
                    yside="right",
                    xside="upper",
                    label="results/s",
                )


class ReliabilityByPlot(Plot):
    """Reliability diagram with one line per prompt variant (or scoring method)."""

    def show(self, d: PlotData) -> None:
        by = "method" if any(k.startswith("method ") for k in d.reliability) else "variant"
        with self.drawing(f"reliability by {by}") as plt:
            self.unit_axes(diagonal=True)
            for i, (name, b) in enumerate(d.reliability.items()):
                b = b[b["count"] > 0]
                plt.plot(
                    b["confidence"].tolist(),
                    b["accuracy"].tolist(),
                    marker="braille",
                    color=COLORS[i % len(COLORS)],
                    label=name,
                )
            plt.xlabel("confidence")


class MinPairPlot(Plot):
    """Histogram of logP(good) − max logP(bad) over minimal pairs (right of 0: correct)."""

    def show(self, d: PlotData) -> None:
        with self.drawing("minimal pairs: logP(good) − logP(bad)") as plt:
            if d.minpair_diffs:
                plt.hist(d.minpair_diffs, bins=20, color="cyan")
                plt.vline(0, color="red")


class PositionPlot(Plot):
    """Share of predictions at each listed position beside the share of gold answers there."""

    def show(self, d: PlotData) -> None:
        with self.drawing("position bias: chosen vs gold"):
            self.frame_bars(d.positions, "chosen", "gold")


class PlotsScreen(Screen[None]):
    """The run's plots; redrawn while the run is writing."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]
    # Below 100 columns or 30 rows, four plots in a 2x2 grid were five rows high: there they
    # stack, each the height of the screen, and the page scrolls.
    DEFAULT_CSS = """
    PlotsScreen #plots-scroll { height: 1fr; }
    PlotsScreen Grid { grid-size: 2 2; height: 1fr; }
    PlotsScreen.-narrow Grid, PlotsScreen.-short Grid { grid-size: 1; grid-rows: 20; height: auto; }
    PlotsScreen PlotextPlot { border: round $primary; }
    PlotsScreen #plots-head { height: auto; }
    """

    def __init__(self, run_id: str, task: str | None, live_feed: Any = None) -> None:
        super().__init__()
        self.run_id = run_id
        self.run_task = task
        self.feed = (
            live_feed  # a tui.data.live.LiveFeed of its own when another process writes the run
        )
        self._live_rows: dict[tuple[str, str], dict[str, Any]] = {}
        self._n_shown = -1

    @property
    def llm_app(self) -> LlmscopeApp:
        return cast("LlmscopeApp", self.app)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="plots-head")
        with VerticalScroll(id="plots-scroll"), Grid():
            yield TimelinePlot(id="plot-timeline")
            yield ReliabilityByPlot(id="plot-rel")
            yield MinPairPlot(id="plot-minpairs")
            yield PositionPlot(id="plot-position")
        yield Footer()

    def on_mount(self) -> None:
        self.load()
        self.set_interval(max(self.llm_app.refresh_s, 0.5), self._tick)

    def _tick(self) -> None:
        if not any(w.group == "plots" and w.is_running for w in self.workers):
            self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="plots")
    def load(self) -> None:
        if self.feed is not None:
            for r in self.feed.read_new():
                self._live_rows[(str(r.get("item_id")), str(r.get("variant")))] = r
            df = pd.DataFrame(list(self._live_rows.values()))
            if not df.empty:
                df["seq"] = range(len(df))
        else:
            from llmscope.analysis.metric_values import headline
            from llmscope.analysis.metrics import run_metrics

            cols = ", ".join(PLOT_COLUMNS)
            with self.llm_app.handle.use() as store:
                df = store.query_df(
                    f"SELECT {cols} FROM results WHERE run_id = ? ORDER BY seq", [self.run_id]
                )
                run = store.get_run(self.run_id)
                # the report's numbers (the same cached pipeline run), not the running share
                head = headline(run_metrics(store, run)) if run is not None and len(df) else None
        for c in PLOT_COLUMNS:
            if c not in df:
                df[c] = None
        data = plot_data(df, self.run_task)
        if self.feed is None:
            data.headline = head
        self.post_message(PlotsLoaded(data))

    def on_plots_loaded(self, msg: PlotsLoaded) -> None:
        d = msg.data
        if d.n == self._n_shown:
            return
        self._n_shown = d.n
        head = Text()
        head.append(f"run {self.run_id}  ", style="bold")
        head.append(f"{d.n} results")
        h = d.headline
        if h is not None:
            ci = (
                f" [{display(h.name, h.lo)}, {display(h.name, h.hi)}]" if h.ci95 is not None else ""
            )
            head.append(
                f"   {h.name} {display(h.name, h.value)}{ci}   n {h.n if h.n is not None else '-'}"
            )
        elif d.running_acc:
            head.append(f"   running accuracy over the rows so far {d.running_acc[-1]:.3f}")
        if d.rate:
            head.append(f"   last {d.rate[-1]:.1f} results/s")
        self.query_one("#plots-head", Static).update(head)
        self.query_one(TimelinePlot).show(d)
        self.query_one(ReliabilityByPlot).show(d)
        mp = self.query_one(MinPairPlot)
        mp.display = bool(d.minpair_diffs)
        mp.show(d)
        pp = self.query_one(PositionPlot)
        pp.display = d.positions is not None
        pp.show(d)
