"""The drawing of each figure kind (`llmscope figure`, `report --html`): matplotlib figures
whose every number is a metric of the pipeline (:mod:`llmscope.analysis.metrics`) or a stored
per-item value read through the analysis layer. :mod:`llmscope.figures.make` registers them."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn (`llmscope --help` stays fast)
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from llmscope.analysis.metric_values import Metric, RunMetrics


# Okabe & Ito (2008): distinguishable under every common colour-vision deficiency.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000")
COLUMN_WIDTH = 3.3  # inches: one column of a two-column ACL / CogSci page
MAX_BARS = 40  # groups drawn per run in a bar chart; the rest are counted in the caption
MAX_POINTS = 2000  # items in a scatter plot; a larger run is sampled (seed 0, stated)
MAX_ITEMS = 16  # items in the human-vs-model distribution panel


class FigureError(Exception):
    """A figure that cannot be drawn (kind, style, output), with a one-line reason."""


@dataclass
class RunData:
    """One run as the figures see it: its stored record and its pipeline metrics."""

    run: dict[str, Any]
    metrics: RunMetrics
    store: Any = field(repr=False, default=None)

    @property
    def label(self) -> str:
        return f"{self.run.get('model')} ({str(self.run['run_id'])[:8]})"

    def named(self, name: str) -> list[Metric]:
        return [m for m in self.metrics.metrics if m.name == name and m.value is not None]


# -- helpers ----------------------------------------------------------------------------------------
def _new(
    height: float, width: float = COLUMN_WIDTH, rows: int = 1, **kw: Any
) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(rows, 1, squeeze=False, **kw)[:, 0]
    return fig, list(axes)


def _gid(bars: Any, gid: str) -> None:
    """SVG ids on each bar of a container (``gid:0``, ``gid:1``, ...): the file names its data."""
    for j, patch in enumerate(bars.patches):
        patch.set_gid(f"{gid}:{j}")


def _color(i: int) -> str:
    return OKABE_ITO[i % len(OKABE_ITO)]


def _err(ms: Sequence[Metric]) -> list[list[float]]:
    """Asymmetric error bar lengths from each metric's interval (NaN where it has none). A
    bound a rounding error past the estimate (a Wilson bound of 2.8e-17 at a rate of 0) draws
    as no whisker on that side."""
    lo = [m.value - m.lo if m.ci95 is not None and m.value is not None else math.nan for m in ms]
    hi = [m.hi - m.value if m.ci95 is not None and m.value is not None else math.nan for m in ms]
    return [[max(0.0, float(x)) if not math.isnan(x) else x for x in side] for side in (lo, hi)]


def _group_label(g: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in g.items()) or "overall"


def _short(s: str, n: int = 28) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _hbars(
    ax: Axes,
    labels: list[str],
    series: list[tuple[str, list[Metric | None]]],
    xlabel: str,
    gid: str,
) -> None:
    """Grouped horizontal bars, one series per run (or model / gold), with interval whiskers.

    Each bar container is labelled with its series and gets the SVG id ``gid:<series>``."""
    import numpy as np

    k = len(series)
    h = 0.8 / max(k, 1)
    y = np.arange(len(labels))
    for i, (name, ms) in enumerate(series):
        vals = [m.value if m is not None and m.value is not None else math.nan for m in ms]
        present = [m for m in ms if m is not None]
        err = _err([m if m is not None else _NONE for m in ms]) if present else None
        c = ax.barh(
            y - 0.4 + h * (i + 0.5),
            vals,
            height=h,
            xerr=err,
            color=_color(i),
            label=name,
            error_kw={"elinewidth": 0.8, "ecolor": "#333333"},
        )
        _gid(c, f"{gid}:{i}")
    ax.set_yticks(y, [_short(s) for s in labels])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    if k > 1:
        _legend(ax)


class _NoMetric:
    value = None
    lo = None
    hi = None
    ci95 = None


_NONE: Any = _NoMetric()


def _legend(ax: Axes, loc: str = "best") -> None:
    """A legend inside the axes when it is short; below the figure when it has more than two
    entries or long ones (several runs), so it never covers data."""
    handles, labels = ax.get_legend_handles_labels()
    outside = len(labels) > 2 or max((len(x) for x in labels), default=0) > 48
    if (
        outside and not ax.figure.legends
    ):  # one legend below the figure; a second panel's stays inside
        ax.figure.legend(handles, labels, loc="outside lower center", ncol=1)
    else:
        where: dict[str, Any] = {"loc": loc}
        ax.legend(handles, labels, **where)


def _title(fig: Figure, text: str) -> None:
    """A title over the whole figure, each line cut to what one column holds at 8 pt."""
    if text:
        fig.suptitle("\n".join(_short(line, 52) for line in text.split("\n")), fontsize=8)


def _note(fig: Figure, text: str) -> None:
    """A caption line under the figure (sample sizes, what was left out)."""
    fig.supxlabel(text, fontsize=6, color="#444444")


# -- kinds ------------------------------------------------------------------------------------------
HEADLINE_ORDER = (
    "worldsense_accuracy",
    "sg_score",
    "accuracy",
    "item_accuracy",
    "token_f1",
    "flagged_rate",
    "probeval_kl",
)


def headline_name(d: RunData) -> str | None:
    """The run's headline metric that has groups or an interval to draw (pipeline order)."""
    for name in HEADLINE_ORDER:
        if d.named(name):
            return name
    return None


def draw_accuracy(data: list[RunData]) -> Figure:
    """The headline metric overall, per prompt variant and per group, with 95% intervals."""
    name = headline_name(data[0]) or "accuracy"
    labels: list[str] = []
    per_run: list[dict[str, Metric]] = []
    for d in data:
        # per scoring method: the `schemes` figure
        ms = {
            _group_label(m.group): m
            for m in d.named(name)
            if len(m.group) <= 1 and "method" not in m.group
        }
        per_run.append(ms)
        labels += [g for g in ms if g not in labels]
    left = max(0, len(labels) - MAX_BARS)
    labels = labels[:MAX_BARS]
    fig, (ax,) = _new(0.6 + 0.16 * len(labels) * max(1, len(data)) ** 0.5)
    _hbars(
        ax,
        labels,
        [(d.label, [ms.get(g) for g in labels]) for d, ms in zip(data, per_run, strict=True)],
        f"{name} (95% CI)",
        f"accuracy:{name}",
    )
    lo, hi = ax.get_xlim()
    ax.set_xlim(min(0.0, lo), max(1.0, hi))
    if len(data) == 1:
        _title(fig, f"{data[0].run.get('suite_name')} · {data[0].run.get('model')}")
    if left:
        _note(fig, f"first {MAX_BARS} of {MAX_BARS + left} groups shown")
    return fig


def draw_reliability(data: list[RunData]) -> Figure:
    """Reliability diagram: per-bin accuracy against mean confidence, the diagonal, bin counts."""
    fig, (ax, axn) = _new(3.4, rows=2, gridspec_kw={"height_ratios": [3, 1]}, sharex=True)
    ax.plot([0, 1], [0, 1], ls=":", color="#777777", lw=0.8, label="perfect calibration")
    for i, d in enumerate(data):
        acc = {m.group["bin"]: m for m in d.named("bin_accuracy")}
        conf = {m.group["bin"]: m for m in d.named("bin_confidence")}
        bins = [b for b in acc if b in conf]
        x = [float(conf[b].value or 0) for b in bins]
        y = [float(acc[b].value or 0) for b in bins]
        ece = d.metrics.get("ece")
        lab = d.label if len(data) > 1 else "model"
        if ece is not None and ece.value is not None:
            ci = f" [{ece.lo:.3f}, {ece.hi:.3f}]" if ece.ci95 is not None else ""
            lab += f", ECE {ece.value:.3f}{ci}"
        (line,) = ax.plot(x, y, marker="o", color=_color(i), label=lab)
        line.set_gid(f"reliability:{i}")
        lows = [float(b.split("-")[0]) for b in bins]
        w = 0.1 / max(1, len(data))
        c = axn.bar(
            [lo + w * (i + 0.5) for lo in lows],
            [int(acc[b].n or 0) for b in bins],
            width=w,
            color=_color(i),
            label=d.label,
        )
        _gid(c, f"reliability-counts:{i}")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.03, 1.03)  # markers at 0 and 1 drawn whole
    ax.set_ylabel("accuracy")
    _legend(ax, "upper left")
    # two lines: on one, the label ran past a column-wide figure's edge
    axn.set_xlabel("confidence (P(predicted answer),\nrenormalised over the answers)")
    axn.set_ylabel("items")
    return fig


def draw_position(data: list[RunData]) -> Figure:
    """Option-position bias (chosen vs gold rate at the first/last position) and yes/no bias
    (predicted vs gold yes rate per prompt variant)."""
    choice = [d for d in data if d.named("chosen_rate")]
    yesno = [d for d in data if d.named("pred_yes_rate")]
    ws = [d for d in data if d.named("worldsense_bias")]
    panels = [p for p in (("position", choice), ("yesno", yesno)) if p[1]]
    fig, axes = _new(
        1.2 + 1.1 * (len(panels) + bool(ws)) + 0.2 * max(len(data), 1), rows=len(panels) + bool(ws)
    )
    if ws:
        _worldsense_bias(axes[-1], ws)
    for ax, (what, ds) in zip(axes, panels, strict=False):
        model_name, gold_name, key = (
            ("chosen_rate", "gold_rate", "position")
            if what == "position"
            else ("pred_yes_rate", "gold_yes_rate", "variant")
        )
        labels: list[str] = []
        series: list[tuple[str, list[Metric | None]]] = []
        for d in ds:
            ms = {
                (str(m.group.get(key)) if m.group else "overall"): m
                for m in d.named(model_name)
                if len(m.group) <= 1
            }
            gs = {
                (str(m.group.get(key)) if m.group else "overall"): m
                for m in d.named(gold_name)
                if len(m.group) <= 1
            }
            labels += [g for g in ms if g not in labels]
            series.append(
                (
                    f"{d.label if len(ds) > 1 else 'model'}: {model_name}",
                    [ms.get(g) for g in labels],
                )
            )
            series.append(
                (f"{d.label if len(ds) > 1 else 'gold'}: {gold_name}", [gs.get(g) for g in labels])
            )
        # every series over the same labels (a later run may add some)
        series = [(n, ms + [None] * (len(labels) - len(ms))) for n, ms in series]
        _hbars(ax, labels, series, "share of items (95% CI)", f"position:{what}")
        ax.set_xlim(0, 1)
        if what == "yesno":
            yb = ds[0].metrics.get("yes_bias")
            if yb is not None and yb.value is not None:
                ax.set_title(
                    f"yes_bias {yb.value:+.3f}"
                    + (f" [{yb.lo:+.3f}, {yb.hi:+.3f}]" if yb.ci95 else ""),
                    loc="left",
                )
        else:
            ax.set_title("option chosen vs gold, by position", loc="left")
    return fig


def _series(
    data: list[RunData], pick: Callable[[RunData], dict[str, Metric]]
) -> tuple[list[str], list[tuple[str, list[Metric | None]]]]:
    """Bar labels in first-seen order over the runs, and each run's metric per label (None
    where that run has none): what `_hbars` draws, from `pick`'s label -> metric per run."""
    per_run = [pick(d) for d in data]
    labels: list[str] = []
    for ms in per_run:
        labels += [g for g in ms if g not in labels]
    return labels, [
        (d.label, [ms.get(g) for g in labels]) for d, ms in zip(data, per_run, strict=True)
    ]


def _worldsense_bias(ax: Axes, data: list[RunData]) -> None:
    """The WorldSense authors' bias per problem (+1 = always TRUE/POSSIBLE/KNOW), conf95."""
    labels, series = _series(
        data,
        lambda d: {
            str(m.group.get("problemname")): m
            for m in d.named("worldsense_bias")
            if set(m.group) == {"problemname"}
        },
    )
    _hbars(
        ax,
        labels,
        series,
        # two lines, five ticks: on one line (and with matplotlib's nine ticks) the label ran
        # past a column-wide figure's edge and the tick labels touched
        "bias, +1 = always TRUE/POSSIBLE/KNOW\n(conf95)",
        "position:worldsense",
    )
    ax.set_xlim(-1, 1)
    ax.set_xticks([-1, -0.5, 0, 0.5, 1])
    ax.axvline(0, lw=0.6, color="#777777")
    ax.set_title("worldsense_bias per problem", loc="left")


def draw_commonsense(data: list[RunData]) -> Figure:
    """Whiting & Watts (2024): consensus, awareness and commonsensicality overall and per
    category (one run), or commonsensicality per run (several), with bootstrap intervals."""
    names = (
        ("consensus", "awareness", "commonsensicality")
        if len(data) == 1
        else ("commonsensicality",)
    )
    labels: list[str] = []
    series: list[tuple[str, dict[str, Metric]]] = []
    for d in data:
        for name in names:
            ms = {_group_label(m.group): m for m in d.named(name) if len(m.group) <= 1}
            labels += [g for g in ms if g not in labels]
            series.append((name if len(data) == 1 else d.label, ms))
    left = max(0, len(labels) - MAX_BARS)
    labels = labels[:MAX_BARS]
    fig, (ax,) = _new(0.8 + 0.2 * len(labels) * len(series) ** 0.5)
    _hbars(
        ax,
        labels,
        [(n, [ms.get(g) for g in labels]) for n, ms in series],
        "share of statements (95% CI)",
        "commonsense",
    )
    ax.set_xlim(0, 1)
    if left:
        _note(fig, f"first {MAX_BARS} of {MAX_BARS + left} groups shown")
    return fig


def _overall(d: RunData, name: str) -> Metric | None:
    return next((m for m in d.named(name) if not m.group), None)


def draw_plane(data: list[RunData]) -> Figure:
    """Whiting & Watts (2024): each run's consensus (q1 answers equal to the human majority)
    against its awareness (q2 answers equal to it), with 95% intervals, over curves of equal
    commonsensicality sqrt(consensus x awareness). Runs of other suites are not put on one
    plane: the figure names the suite, and a second suite is refused."""

    points: list[tuple[RunData, Metric, Metric]] = []
    for d in data:
        c, a = _overall(d, "consensus"), _overall(d, "awareness")
        if c is not None and a is not None:
            points.append((d, c, a))
    suites = sorted({str(d.run.get("suite_name")) for d, _, _ in points})
    if len(suites) > 1:
        # other statements: their rates are not comparable point by point
        raise FigureError(
            f"plane: the runs are of different suites ({', '.join(suites)}); give runs of one suite"
        )
    imported = [str(d.run.get("run_id", "")).startswith("imp-") for d, _, _ in points]
    fig, (ax,) = _new(COLUMN_WIDTH)
    vals = [v.value for _, c, a in points for v in (c, a)]
    lo = max(0.0, min(vals) - 0.05)
    hi = min(1.0, max(vals) + 0.05)
    import numpy as np

    xs = np.linspace(max(lo, 1e-3), hi, 200)
    for k in np.arange(0.1, 1.0, 0.1):
        ax.plot(xs, k * k / xs, ls=":", lw=0.5, color="#BBBBBB", zorder=0)
        if lo < k < hi:
            ax.text(k, k, f"{k:.1f}", fontsize=5, color="#888888", ha="center", va="center")
    # Many published runs crowd the plane: past 8 they are drawn as dots, and only the two
    # highest and lowest by commonsensicality are named.
    crowd = sum(imported) > 8
    by_score = sorted((c.value * a.value, i) for i, (_, c, a) in enumerate(points) if imported[i])
    named = {i for _, i in by_score[:2] + by_score[-2:]} if crowd else set(range(len(points)))
    ours = 0
    for i, ((d, c, a), imp) in enumerate(zip(points, imported, strict=True)):
        color = "#999999" if imp else _color(ours)
        if imp and crowd:
            ax.plot([c.value], [a.value], "o", ms=2.5, color=color, zorder=1)
        else:
            (xlo, xhi), (ylo, yhi) = _err([c]), _err([a])
            ax.errorbar(
                [c.value],
                [a.value],
                xerr=[xlo, xhi],
                yerr=[ylo, yhi],
                fmt="o",
                ms=2.5 if imp else 4,
                lw=0.5,
                color=color,
                zorder=1 if imp else 3,
            )
        if not imp:
            ours += 1
        if not imp or i in named:
            ax.annotate(
                _short(str(d.run.get("model")), 18),
                (c.value, a.value),
                fontsize=5,
                xytext=(2, 2),
                textcoords="offset points",
                color="#555555" if imp else color,
            )
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.set_xlabel("consensus (q1 = human majority)")
    ax.set_ylabel("awareness (q2 = human majority)")
    _title(fig, f"{suites[0] if suites else ''} (dotted: equal commonsensicality)")
    if any(imported):
        _note(
            fig,
            f"grey: {sum(imported)} imported published runs (binarised answers)"
            + ("; intervals of ours only" if crowd else ""),
        )
    return fig


def draw_schemes(data: list[RunData]) -> Figure:
    """Accuracy under each scoring scheme (method) with intervals; disagreement in the title."""
    labels, series = _series(
        data,
        lambda d: {
            str(m.group["method"]): m for m in d.named("accuracy") if set(m.group) == {"method"}
        },
    )
    fig, (ax,) = _new(0.9 + 0.18 * len(labels) * max(1, len(data)) ** 0.5)
    _hbars(
        ax,
        labels,
        series,
        "accuracy (95% CI)",
        "schemes",
    )
    ax.set_xlim(0, 1)
    parts = []
    for name in ("scheme_disagreement_rate", "scheme_flip_rate"):
        for m in data[0].named(name)[:1]:  # its group names the number of schemes compared
            parts.append(f"{name} {m.value:.3f}")
    _title(fig, "\n".join(parts))
    return fig


def draw_sg(data: list[RunData]) -> Figure:
    """SyntaxGym score per suite (circuit) and overall, with 95% intervals."""
    labels, series = _series(
        data,
        lambda d: {
            (str(next(iter(m.group.values()))) if m.group else "overall"): m
            for m in d.named("sg_score")
            if len(m.group) <= 1
        },
    )
    fig, (ax,) = _new(0.7 + 0.16 * len(labels) * max(1, len(data)) ** 0.5)
    _hbars(
        ax,
        labels,
        series,
        "SG score (95% CI)",
        "sg",
    )
    ax.set_xlim(0, 1)
    ax.axvline(0.5, ls=":", lw=0.6, color="#777777")
    return fig


def _human_form(d: RunData) -> str:
    if d.named("human_pearson") or d.named("human_spearman"):
        return "agreement"
    return "ratings" if d.named("human_rating_share") else "choices"


def draw_human(data: list[RunData]) -> Figure:
    """Human vs model: P(yes) against human agreement (yes/no), rating histograms (rating), or
    per-item choice distributions (choice with human counts, one run)."""
    forms = {_human_form(d) for d in data}
    if len(forms) > 1:
        raise FigureError(
            f"figure human: these runs hold different human data ({', '.join(sorted(forms))}); "
            "draw them one at a time"
        )
    form = forms.pop()
    if form == "agreement":
        return _human_scatter(data)
    if form == "ratings":
        return _human_ratings(data)
    if len(data) > 1:
        raise FigureError(
            "figure human: per-item choice distributions are drawn for one run at a time"
        )
    return _human_choices(data[0])


def _human_scatter(data: list[RunData]) -> Figure:
    import pandas as pd

    from llmscope.analysis.metrics import results_with_fields
    from llmscope.analysis.producers.commonsense import human_agreement_pairs

    fig, (ax,) = _new(3.0)
    notes = []
    for i, d in enumerate(data):
        pairs = human_agreement_pairs(results_with_fields(d.store, str(d.run["run_id"])))
        n = len(pairs)
        if n > MAX_POINTS:
            pairs = pairs.sample(MAX_POINTS, random_state=0)
            notes.append(f"{d.label}: {MAX_POINTS} of {n} statements shown (random, seed 0)")
        r = d.metrics.get("human_pearson")
        rho = d.metrics.get("human_spearman")
        lab = d.label if len(data) > 1 else "statements"
        stats = [f"r {m.value:.3f}" for m in (r,) if m is not None and m.value is not None]
        stats += [f"ρ {m.value:.3f}" for m in (rho,) if m is not None and m.value is not None]
        if stats:
            lab += f" ({', '.join(stats)}; n {r.n if r is not None else n})"
        sc = ax.scatter(
            pd.to_numeric(pairs["human"], errors="coerce"),
            pd.to_numeric(pairs["p_yes"], errors="coerce"),
            s=6,
            alpha=0.7,
            color=_color(i),
            label=lab,
            linewidths=0,
        )
        sc.set_gid(f"human:{i}")
    ax.plot([0, 1], [0, 1], ls=":", color="#777777", lw=0.8)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("human agreement (share who agree)")
    ax.set_ylabel("model P(yes)")
    _legend(ax, "upper left")
    if notes:
        _note(fig, "; ".join(notes))
    return fig


def _human_ratings(data: list[RunData]) -> Figure:
    d = data[0]
    human = {str(m.group["rating"]): m for m in d.named("human_rating_share")}
    labels = list(human)
    series: list[tuple[str, list[Metric | None]]] = [
        ("humans (gold)", [human.get(g) for g in labels])
    ]
    for x in data:
        model = {str(m.group["rating"]): m for m in x.named("model_rating_share")}
        series.append((x.label if len(data) > 1 else "model", [model.get(g) for g in labels]))
    fig, (ax,) = _new(1.0 + 0.2 * len(labels) * len(series) ** 0.5)
    _hbars(ax, labels, series, "share of ratings (95% CI)", "ratings")
    ax.set_ylabel("rating")
    ax.set_xlim(0, 1)
    _legend(ax)
    return fig


def _human_choices(d: RunData) -> Figure:
    """Per item, the human choice distribution above the model's (first items, count stated)."""
    import numpy as np

    from llmscope.analysis.human import choice_frame
    from llmscope.analysis.metrics import results_with_fields

    spec = d.store.suite_spec(d.run["suite_id"]) if d.run.get("suite_id") else {}
    c = choice_frame(results_with_fields(d.store, str(d.run["run_id"])), spec)
    n = len(c)
    c = c.head(MAX_ITEMS)
    fig, (ax,) = _new(0.8 + 0.32 * len(c))
    ylabels = []
    y = 0
    for rec in c.to_dict("records"):
        for who, dist in (("human", rec["human"]), ("model", rec["model"])):
            left = 0.0
            for j, p in enumerate(dist):
                b = ax.barh(
                    [y],
                    [p],
                    left=left,
                    height=0.8,
                    color=_color(j),
                    label=f"option {j + 1}" if y == 0 else None,
                )
                _gid(b, f"choice:{rec['item_id']}:{who}:{j}")
                left += float(p)
            ylabels.append(f"{_short(str(rec['item_id']), 14)} {who}")
            y += 1
    ax.set_yticks(np.arange(len(ylabels)), ylabels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of choices (options in item order)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(c) < 4 else -0.08), ncol=4)
    tv = d.metrics.get("human_tv_distance")
    ag = d.metrics.get("human_majority_agreement")
    _title(
        fig,
        "\n".join(
            f"{m.name} {m.value:.3f}" for m in (tv, ag) if m is not None and m.value is not None
        ),
    )
    if n > MAX_ITEMS:
        _note(fig, f"first {MAX_ITEMS} of {n} item variants shown")
    return fig


def draw_surprisal(data: list[RunData], item: str | None = None) -> Figure:
    """Surprisal (bits) of each word of one item, one panel per condition (stored values)."""
    from llmscope.analysis.syntaxgym import word_frame

    if len(data) > 1:
        raise FigureError("figure surprisal: one run at a time (the words of one item)")
    d = data[0]
    words = word_frame(d.store.results_frame(str(d.run["run_id"])), d.run)
    if words.empty:
        raise FigureError(f"run {d.run['run_id']} has no word surprisals")
    item = item if item is not None else str(words["item_id"].iloc[0])
    w = words[words["item_id"].astype(str) == str(item)]
    if w.empty:
        raise FigureError(f"item {item!r} is not in run {d.run['run_id']}")
    conds = list(dict.fromkeys(w["condition"]))
    fig, axes = _new(0.9 + 0.85 * len(conds), rows=len(conds), sharey=True)
    regions = list(dict.fromkeys(w["region"].astype(str)))
    for ax, cond in zip(axes, conds, strict=True):
        cw = w[w["condition"] == cond]
        cols = [_color(regions.index(str(r))) for r in cw["region"].astype(str)]
        b = ax.bar(range(len(cw)), cw["surprisal_bits"].astype(float), color=cols)
        _gid(b, f"surprisal:{cond}")
        ax.set_xticks(range(len(cw)), [str(x) for x in cw["word"]], rotation=45, ha="right")
        ax.set_title(str(cond), loc="left")
        ax.set_ylabel("bits")
    axes[0].set_title(f"item {item}: {axes[0].get_title(loc='left')}", loc="left")
    _note(fig, "surprisal per word; colour = region")
    return fig


def draw_probeval(data: list[RunData]) -> Figure:
    """ProbEval: per question, the human answer-cluster distribution above the model's (the
    smoothed distributions its KL compares; grey: model answers matching no cluster)."""
    import numpy as np

    from llmscope.analysis.probeval_run import probeval_for_run

    if len(data) > 1:
        raise FigureError("figure probeval: one run at a time")
    d = data[0]
    res = probeval_for_run(d.store, d.run)
    if res is None or not res.scores:
        raise FigureError(f"run {d.run['run_id']} has no ProbEval questions")
    qids = list(res.scores)
    shown = qids[:MAX_ITEMS]
    fig, (ax,) = _new(0.8 + 0.36 * len(shown))
    ylabels = []
    y = 0
    for qid in shown:
        sc = res.scores[qid]
        for who in ("human", "model"):
            left = 0.0
            for j, rec in enumerate(sc.table.to_dict("records")):
                p = float(rec[f"{who}_p"])
                wrong = rec["cluster"] == "wrong"
                b = ax.barh(
                    [y], [p], left=left, height=0.8, color="#BBBBBB" if wrong else _color(j)
                )
                _gid(b, f"probeval:{qid}:{who}:{rec['cluster']}")
                if p >= 0.15:
                    ax.text(
                        left + p / 2,
                        y,
                        _short(str(rec["cluster"]), 12),
                        ha="center",
                        va="center",
                        fontsize=5.5,
                        color="black" if wrong else "white",
                    )
                left += p
            ylabels.append(
                f"{_short(str(qid), 12)} {who}" + (f" (KL {sc.kl:.2f})" if who == "human" else "")
            )
            y += 1
    ax.set_yticks(np.arange(len(ylabels)), ylabels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel(
        "share of answers per cluster,\nLaplace-smoothed as in the KL\n(grey: matches no cluster)"
    )
    kl = d.metrics.get("probeval_kl")
    if kl is not None and kl.value is not None:
        ci = f" [{kl.lo:.3f}, {kl.hi:.3f}]" if kl.ci95 is not None else ""
        _title(fig, f"probeval_kl {kl.value:.3f}{ci}")
    if len(qids) > len(shown):
        _note(fig, f"first {len(shown)} of {len(qids)} questions shown")
    return fig
