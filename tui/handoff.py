"""The dashboard's hand-off (`w`): the run's offline page and the current panel's figure, as files.

The files go in a folder beside the database (``<db>-figures/``): ``<run>.html`` (the page
`llmscope report --html` writes) and ``<run>-<kind>.svg`` (what `llmscope figure` writes).
Called from a thread worker; it renders nothing on screen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["PANEL_FIGURES", "handoff_folder", "handoff_message", "write_handoff"]

# The figure each dashboard panel is drawn as, first that applies (llmscope.figures.make.KINDS).
PANEL_FIGURES = {
    "accuracy": ("sg", "accuracy"),
    "calibration": ("reliability",),
    "humans": ("human", "probeval", "position"),
}


def handoff_folder(db_path: str | Path) -> Path:
    """Where the dashboard writes: ``<database file name without suffix>-figures`` beside it."""
    p = Path(db_path)
    return p.with_name(p.stem + "-figures")


def write_handoff(store: Any, run_id: str, panel: str, db_path: str | Path) -> list[Path]:
    """Write the run's page and the panel's figure (when one applies); returns the paths."""
    from llmscope.figures.html_report import write_page
    from llmscope.figures.make import kinds_for, load_runs, write_figure
    from llmscope.report import build_report

    run = store.get_run(run_id)
    if run is None:
        raise ValueError(f"no run {run_id!r} in {db_path}")
    folder = handoff_folder(db_path)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    page = folder / f"{run_id}.html"
    write_page(store, [run], build_report(store, run), page, source=Path(db_path).name)
    out.append(page)
    (data,) = load_runs(store, [run])
    have = kinds_for(data)
    for kind in PANEL_FIGURES.get(panel, ()):
        if kind in have:
            out.append(folder / f"{run_id}-{kind}.svg")
            write_figure(kind, [data], out[-1])
            break
    return out


def handoff_message(paths: list[Path], panel: str) -> str:
    """What the notification says: every file written, and when the panel had no figure."""
    text = "wrote " + "  ".join(str(p) for p in paths)
    if len(paths) < 2:
        text += f"  (no figure applies to the {panel} panel of this run)"
    return text
