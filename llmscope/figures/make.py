"""Publication figures of stored runs, drawn with matplotlib from the metrics pipeline.

matplotlib, because a paper needs static vector files (PDF with embedded TrueType fonts, SVG,
PNG) that need no JavaScript runtime to open, and because a drawn figure can be read back
(its artists hold the plotted values) so tests check the data, not pixels.

Every number drawn is a metric of :func:`llmscope.analysis.metrics.run_metrics` (what
`llmscope report --json` prints) or a stored per-item value (P(yes), human agreement, word
surprisal) read through the analysis layer; nothing is recomputed here. Each kind says which
runs it applies to by the metrics they have, never by task name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmscope.figures.irt import draw_irt
from llmscope.figures.kinds import (
    COLUMN_WIDTH,
    OKABE_ITO,
    FigureError,
    RunData,
    draw_accuracy,
    draw_commonsense,
    draw_human,
    draw_plane,
    draw_position,
    draw_probeval,
    draw_reliability,
    draw_schemes,
    draw_sg,
    draw_surprisal,
    headline_name,
)

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn (`llmscope --help` stays fast)
    from matplotlib.figure import Figure

__all__ = [
    "KINDS",
    "FigureError",
    "RunData",
    "load_runs",
    "kinds_for",
    "make_figure",
    "write_figure",
    "svg_text",
    "OKABE_ITO",
    "COLUMN_WIDTH",
]


# Publication defaults: fonts embedded as TrueType (Type 42: editable, accepted by ACL's and
# most publishers' checks), 8 pt text readable at column width, Okabe-Ito colours.
RC: dict[str, Any] = {
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "svg.fonttype": "path",
    "text.parse_math": False,  # labels are data (item ids, words): a "$" is a dollar sign
    "svg.hashsalt": "llmscope",  # stable ids: the same figure gives the same file
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.linewidth": 0.6,
    "lines.linewidth": 1.2,
    "lines.markersize": 4,
    "errorbar.capsize": 2,
    # no "tight" box: constrained layout fits labels inside the figure, so a file is exactly
    # the width asked for (one column), however long its labels
    "savefig.bbox": None,
    "figure.constrained_layout.h_pad": 0.03,
    "figure.constrained_layout.w_pad": 0.03,
    "savefig.dpi": 300,
}


def load_runs(
    store: Any,
    runs: Sequence[dict[str, Any]],
    on_run: Callable[[dict[str, Any]], None] | None = None,
) -> list[RunData]:
    """The pipeline's metrics of each run (cached per rows fingerprint, as `report` reads them);
    `on_run` is told each run before its metrics are read (a progress bar)."""
    from llmscope.analysis.metrics import run_metrics

    out = []
    for r in runs:
        if on_run is not None:
            on_run(r)
        out.append(RunData(dict(r), run_metrics(store, r), store))
    return out


# -- kinds ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Kind:
    """One figure kind: what it shows, which runs it applies to, how it is drawn."""

    name: str
    title: str
    applies: Callable[[RunData], bool]
    draw: Callable[[list[RunData]], Figure]
    min_runs: int = 1  # a kind drawn across runs (irt) is never offered for one run alone


def _has(*names: str) -> Callable[[RunData], bool]:
    return lambda d: any(d.named(n) for n in names)


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "accuracy",
            "headline metric by prompt variant and group, with 95% intervals",
            # a SyntaxGym run's headline is its SG score: the `sg` figure
            lambda d: headline_name(d) not in (None, "sg_score"),
            draw_accuracy,
        ),
        Kind(
            "reliability",
            "reliability diagram with bin counts and ECE",
            _has("bin_accuracy"),
            draw_reliability,
        ),
        Kind(
            "position",
            "option-position and yes/no bias: model vs gold rates (WorldSense: bias per problem)",
            _has("chosen_rate", "pred_yes_rate", "worldsense_bias"),
            draw_position,
        ),
        Kind(
            "human",
            "human vs model: P(yes) vs human agreement, rating histograms, choice distributions",
            _has("human_pearson", "human_rating_share", "human_tv_distance"),
            draw_human,
        ),
        Kind(
            "commonsense",
            "consensus, awareness and commonsensicality per category (Whiting & Watts 2024)",
            _has("commonsensicality"),
            draw_commonsense,
        ),
        Kind(
            "plane",
            "consensus against awareness per run, over curves of equal commonsensicality "
            "(Whiting & Watts 2024)",
            _has("consensus"),
            draw_plane,
        ),
        Kind(
            "schemes",
            "accuracy under each scoring scheme and their disagreement",
            lambda d: any(set(m.group) == {"method"} for m in d.named("accuracy")),
            draw_schemes,
        ),
        Kind(
            "sg",
            "SyntaxGym score per suite (circuit) with 95% intervals",
            _has("sg_score"),
            draw_sg,
        ),
        Kind(
            "probeval",
            "ProbEval: human vs model answer-cluster distributions per question",
            _has("probeval_kl"),
            draw_probeval,
        ),
        Kind(
            "surprisal",
            "surprisal per word of one item across its conditions (SyntaxGym runs)",
            _has("sg_score"),
            draw_surprisal,
        ),
        Kind(
            "irt",
            "IRT item map across runs of one suite: 2PL difficulty vs discrimination, 95% "
            "intervals, likely label errors marked",
            lambda d: bool(d.named("accuracy")),
            draw_irt,
            min_runs=2,
        ),
    )
}


def kinds_for(d: RunData) -> list[str]:
    """The figure kinds that apply to a run (by the metrics it has), drawn from it alone."""
    return [k.name for k in KINDS.values() if k.min_runs <= 1 and k.applies(d)]


def _style_context(style: str | None) -> Any:
    import contextlib

    import matplotlib as mpl
    import matplotlib.style as mstyle

    stack = contextlib.ExitStack()
    from cycler import cycler

    rc: Any = {**RC, "axes.prop_cycle": cycler(color=list(OKABE_ITO))}
    stack.enter_context(mpl.rc_context(rc))
    if style:
        if not (Path(style).is_file() or style in mstyle.available):
            stack.close()
            raise FigureError(
                f"--style {style}: not a style file or a matplotlib style; styles: "
                f"{', '.join(sorted(mstyle.available)[:12])}, ..."
            )
        try:
            stack.enter_context(mstyle.context(style))
        except (OSError, ValueError) as e:
            stack.close()
            raise FigureError(f"--style {style}: {e}") from e
    return stack


def make_figure(
    kind: str, data: list[RunData], *, style: str | None = None, item: str | None = None
) -> Figure:
    """Draw figure ``kind`` for the runs (a one-line :class:`FigureError` when it does not apply)."""
    with _style_context(style):
        return _draw(kind, data, item)


def _draw(kind: str, data: list[RunData], item: str | None) -> Figure:
    if kind not in KINDS:
        raise FigureError(f"unknown figure {kind!r}; kinds: {', '.join(KINDS)}")
    if not data:
        raise FigureError("no run to draw")
    k = KINDS[kind]
    for d in data:
        if not k.applies(d):
            ok = kinds_for(d)
            raise FigureError(
                f"figure {kind} does not apply to run {d.run['run_id']} ({d.run.get('task')} task, "
                f"suite {d.run.get('suite_name')}); kinds that do: {', '.join(ok) or 'none'}"
            )
    if kind == "surprisal":
        return draw_surprisal(data, item)
    return k.draw(data)


FORMATS = ("pdf", "svg", "png")


def write_figure(
    kind: str,
    data: list[RunData],
    path: str | Path,
    *,
    style: str | None = None,
    item: str | None = None,
) -> Figure:
    """Draw figure ``kind`` and write it to ``path`` (format from the suffix: pdf, svg, png),
    drawn and saved under the same style. No timestamps: the same data gives the same file."""
    p = Path(path)
    fmt = p.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise FigureError(f"-o {path}: the file must end in .pdf, .svg or .png")
    meta: dict[str, Any] = {"svg": {"Date": None}, "pdf": {"CreationDate": None}, "png": {}}[fmt]
    meta["Creator" if fmt != "png" else "Software"] = "llmscope (matplotlib)"
    with _style_context(style):
        fig = _draw(kind, data, item)
        try:
            fig.savefig(p, format=fmt, metadata=meta)
        except OSError as e:
            raise FigureError(f"-o {path}: cannot write: {e.strerror or e}") from e
    return fig


def svg_text(fig: Figure) -> str:
    """The figure as SVG for inlining in a web page: text kept as text, and no URL at all (the
    RDF metadata and the namespace declarations an HTML parser ignores are left out, and
    ``xlink:href`` is SVG 2's plain ``href``), so a page can assert it references nothing."""
    import io
    import re

    import matplotlib as mpl

    buf = io.StringIO()
    rc: Any = {**RC, "svg.fonttype": "none"}
    with mpl.rc_context(rc):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    s = buf.getvalue()
    s = s[s.index("<svg") :]
    s = re.sub(r"<metadata>.*?</metadata>\s*", "", s, count=1, flags=re.S)
    s = s.replace(" xlink:href=", " href=")
    # text kept as text is laid out by the browser: a bidi control in a run's name or label
    # would reorder it, so each is written as a visible, escaped `<U+202E>`
    from llmscope.engine.textsafety import BIDI_CONTROLS

    s = BIDI_CONTROLS.sub(lambda m: f"&lt;U+{ord(m.group()):04X}&gt;", s)
    return re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", s[: s.index(">")]) + s[s.index(">") :]
