"""The IRT item map (`llmscope figure irt`): each item's 2PL difficulty against its
discrimination, with 95% intervals, the items flagged as likely label errors marked and named.

Every value drawn is `llmscope.analysis.irt.fit_stored`'s (what `llmscope irt --json` prints for
the same runs); the SVG names its points (`irt-items`, `irt-flagged`) so tests read them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmscope.figures.kinds import COLUMN_WIDTH, OKABE_ITO, FigureError, RunData

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MIN_RUNS = 2  # as `llmscope irt`: the figure is asked for, so any fit the library makes is drawn


def _err(values: list[float], cis: list[tuple[float | None, float | None]]) -> list[list[float]]:
    """Error bar lengths below and above each value (0 where the fit gives no interval)."""
    lo = [v - c[0] if c[0] is not None else 0.0 for v, c in zip(values, cis, strict=True)]
    hi = [c[1] - v if c[1] is not None else 0.0 for v, c in zip(values, cis, strict=True)]
    return [lo, hi]


def draw_irt(data: list[RunData]) -> Figure:
    """Item map: difficulty (x) vs discrimination (y) per item, 95% intervals as error bars;
    flagged items (discrimination's interval below 0) in red crosses with their names."""
    from matplotlib.figure import Figure

    from llmscope.analysis.irt import DOES_NOT_DISCRIMINATE, IrtError, fit_stored

    if len(data) < MIN_RUNS:
        raise FigureError(
            f"figure irt needs {MIN_RUNS} or more runs of one suite (--run A --run B ..., or "
            f"--suite NAME); got {len(data)}"
        )
    store = data[0].store
    if store is None:
        raise FigureError("figure irt reads the runs' rows: load the runs from a database")
    try:
        fit = fit_stored(store, [d.run for d in data], "2pl")
    except IrtError as e:
        raise FigureError(f"figure irt: {e}") from e
    fig = Figure(figsize=(COLUMN_WIDTH, 2.8), layout="constrained")
    ax = fig.subplots()
    groups: list[tuple[Any, str, str, str]] = [
        ([i for i in fit.items if not i.flagged], OKABE_ITO[0], "o", "irt-items"),
        ([i for i in fit.items if i.flagged], OKABE_ITO[3], "X", "irt-flagged"),
    ]
    for items, color, marker, gid in groups:
        if not items:
            continue
        x = [i.difficulty for i in items]
        y = [i.discrimination for i in items]
        ax.errorbar(
            x,
            y,
            xerr=_err(x, [i.difficulty_ci for i in items]),
            yerr=_err(y, [i.discrimination_ci for i in items]),
            fmt="none",
            ecolor=color,
            elinewidth=0.5,
            alpha=0.45,
            capsize=0,
        )
        label = (
            f"likely label error ({len(items)})" if gid == "irt-flagged" else f"item ({len(items)})"
        )
        sc = ax.scatter(
            x, y, s=14 if marker == "o" else 28, c=color, marker=marker, label=label, zorder=3
        )
        sc.set_gid(gid)
        if gid == "irt-flagged":
            for i in items:
                ax.annotate(
                    i.item,
                    (i.difficulty, i.discrimination),
                    xytext=(3, -8),
                    textcoords="offset points",
                    fontsize=6,
                    color=color,
                )
    ax.axhline(0.0, color="#777777", lw=0.6, ls=":")
    ax.axhline(
        DOES_NOT_DISCRIMINATE,
        color="#777777",
        lw=0.6,
        ls="--",
        label=f"a = {DOES_NOT_DISCRIMINATE}: below, does not discriminate",
    )
    ax.set_xlabel("difficulty b (ability scale; 95% intervals)")
    ax.set_ylabel("discrimination a")
    ax.set_title(
        f"2PL item map: {fit.suite}\n{len(fit.abilities)} runs × {len(fit.items)} items"
        + (f" ({len(fit.constant_items)} answered alike, not fitted)" if fit.constant_items else "")
        + "".join(f"\nWARNING: {w}" for w in fit.warnings),
        loc="left",
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1)
    return fig
