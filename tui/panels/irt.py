"""Item response theory in the TUI: what the item drill-down and the study's IRT screen show.

Every number is `llmscope.analysis.irt`'s (`fit_stored`: the fit `llmscope irt` prints, remembered
per runs and their rows), and every reading is its `read_item`; this module picks the runs, calls
them in a worker thread (the screens' `load_*` workers), and draws the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.message import Message

from llmscope.tui.widgets import literal, plain_table

if TYPE_CHECKING:
    from llmscope.analysis.irt import IrtFit, ItemParams
    from llmscope.studies.store import CellRow

__all__ = [
    "IrtLoaded",
    "StudyIrt",
    "StudyIrtLoaded",
    "SuiteIrt",
    "ci_text",
    "item_irt",
    "render_item_irt",
    "study_irt",
]

MODEL = "2pl"  # the fit that can flag a label error (Rasch has no sign to estimate)
N_LISTED = 5  # hardest and least discriminating items listed on the study's IRT screen


@dataclass
class ItemIrt:
    """The fit an item drill-down shows, or why there is none (`note`)."""

    fit: IrtFit | None
    note: str
    scope: str  # which runs were fitted, in words
    command: str = ""  # the `llmscope irt` command that prints the same fit


class IrtLoaded(Message):
    def __init__(self, result: ItemIrt) -> None:
        super().__init__()
        self.result = result


def _cmd(runs: Sequence[dict[str, Any]], suite_name: str, by_suite: bool) -> str:
    """The `llmscope irt` command for these runs; a long run list is shortened (marked …)."""
    if by_suite:
        return f"llmscope irt --suite {suite_name}"
    return run_list_command([str(r["run_id"]) for r in runs])


def run_list_command(ids: Sequence[str]) -> str:
    """`llmscope irt --runs A,B,...`, the list shortened to its first three and last run
    (marked "…", with the count) beyond six runs."""
    if len(ids) <= 6:
        return "llmscope irt --runs " + ",".join(ids)
    return f"llmscope irt --runs {','.join(ids[:3])},…,{ids[-1]} ({len(ids)} runs)"


def item_irt(
    store: Any, run_id: str, runs: Sequence[str] | None = None, scope: str = ""
) -> ItemIrt:
    """The 2PL fit for the drill-down of an item of run `run_id`: over `runs` when given (a
    study's runs of the suite), else over every run of the run's suite in the file. Fewer than
    `MIN_RUNS` runs: no fit, a note saying so. Blocking: called from a worker thread."""
    from llmscope.analysis.irt import MIN_RUNS, IrtError, fit_stored, runs_of_suite

    run = store.get_run(run_id)
    if run is None:
        return ItemIrt(None, f"IRT: run {run_id} is not in the file", "")
    name = str(run.get("suite_name") or "")
    if runs is None:
        chosen = runs_of_suite(store, suite_id=str(run["suite_id"]))
        # `--suite NAME` selects the same runs when the name belongs to one suite id
        same = len(runs_of_suite(store, suite_name=name)) == len(chosen)
        scope = scope or f"the {len(chosen)} runs of suite {name} in this file"
        command = _cmd(chosen, name, same)
    else:
        chosen = [r for r in (store.get_run(x) for x in runs) if r is not None]
        scope = scope or f"{len(chosen)} runs of suite {name}"
        command = _cmd(chosen, name, False)
    if len(chosen) < MIN_RUNS:
        return ItemIrt(
            None,
            f"IRT: {len(chosen)} run(s) of suite {name} here; item difficulty and discrimination "
            f"are shown from {MIN_RUNS} runs (models) on a suite; "
            f"`{_cmd(chosen, name, runs is None)}` fits any 2 or more.",
            scope,
        )
    try:
        return ItemIrt(fit_stored(store, chosen, MODEL), "", scope, command)
    except IrtError as e:
        return ItemIrt(None, f"IRT: {e}", scope, command)


def ci_text(ci: tuple[float | None, float | None]) -> str:
    """A 95% interval as `[lo, hi]` (signed, two decimals), or "(no interval)"."""
    lo, hi = ci
    return "(no interval)" if lo is None or hi is None else f"[{lo:+.2f}, {hi:+.2f}]"


def _item_style(i: ItemParams) -> str:
    from llmscope.analysis.irt import DOES_NOT_DISCRIMINATE

    return (
        "bold red"
        if i.flagged
        else ("yellow" if i.discrimination < DOES_NOT_DISCRIMINATE else "green")
    )


def render_item_irt(res: ItemIrt | None, item_id: str) -> Any:
    """The drill-down's IRT block for one item: per fitted (item, variant) its difficulty and
    discrimination with 95% intervals and the plain-words reading; or why none is shown."""
    from llmscope.analysis.irt import read_item

    head = Text("item response theory (2PL)", style="bold underline")
    if res is None:
        return Group(head, Text("fitting ... (in the background)", style="dim"))
    if res.fit is None:
        return literal("\n" + res.note, "dim")
    fit = res.fit
    mine = [i for i in fit.items if i.item_id == item_id]
    parts: list[Any] = [head]
    sub = Text(f"fitted on {res.scope}", style="dim")
    if res.command:
        sub.append(f"  (= {res.command})", style="dim")
    parts.append(sub)
    parts.extend(Text(f"WARNING: {w}", style="bold yellow") for w in fit.warnings)
    if not mine:
        left = [x for x in fit.constant_items if x.partition("/")[0] == item_id]
        why = (
            "every run answered it alike (all right or all wrong): it carries no information "
            "about difficulty and is left out of the fit"
            if left
            else "no run answered it with a gold answer, so it is not in the fit"
        )
        parts.append(literal(f"not fitted: {why}", "yellow"))
        return Group(*parts)
    t = Table(box=None, padding=(0, 1), header_style="bold")
    for c in ("variant", "difficulty b [95% CI]", "discrimination a [95% CI]", "right", "runs"):
        t.add_column(c, no_wrap=True)
    for i in mine:
        t.add_row(
            literal(i.variant or "-"),
            f"{i.difficulty:+.2f} {ci_text(i.difficulty_ci)}",
            Text(f"{i.discrimination:+.2f} {ci_text(i.discrimination_ci)}", style=_item_style(i)),
            f"{i.p_correct:.2f}",
            str(i.n),
        )
    parts.append(t)
    for i in mine:
        r = read_item(i)
        line = Text(f"{i.variant}: " if len(mine) > 1 else "", style="bold")
        line.append(r.text, style=_item_style(i))
        parts.append(line)
    return Group(*parts)


# -- a study's IRT ---------------------------------------------------------------------------------
@dataclass
class SuiteIrt:
    """One suite of a study: its cells' runs and their fit (or why there is none)."""

    suite: str
    suite_id: str
    runs: list[str]
    cells: dict[str, str]  # run id -> the cell's key
    fit: IrtFit | None = None
    note: str = ""
    command: str = ""  # the `llmscope irt` command that prints the same fit


@dataclass
class StudyIrt:
    """A study's fits, one per suite its cells' runs score, and notes on what was left out."""

    study: str
    suites: list[SuiteIrt] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class StudyIrtLoaded(Message):
    def __init__(self, result: StudyIrt) -> None:
        super().__init__()
        self.result = result


def study_irt(store: Any, study: str, rows: Sequence[CellRow]) -> StudyIrt:
    """The 2PL fit of each suite of a study over the runs of its cells (a cell's run is one
    respondent); suites with fewer than `MIN_RUNS` such runs get a note. Blocking."""
    from llmscope.analysis.irt import MIN_RUNS, IrtError, fit_stored

    out = StudyIrt(study)
    groups: dict[str, SuiteIrt] = {}
    no_run = 0
    for c in sorted(rows, key=lambda r: r.position):
        run = store.get_run(c.run_id) if c.run_id else None
        if run is None:
            no_run += 1
            continue
        sid = str(run["suite_id"])
        g = groups.setdefault(sid, SuiteIrt(str(run.get("suite_name") or c.suite), sid, [], {}))
        g.runs.append(str(run["run_id"]))
        g.cells[str(run["run_id"])] = c.cell
    if no_run:
        out.notes.append(f"{no_run} cell(s) without a run are not in any fit")
    for g in groups.values():
        g.command = run_list_command(g.runs)
        if len(g.runs) < MIN_RUNS:
            g.note = (
                f"{len(g.runs)} cell run(s) on suite {g.suite}: IRT is shown from {MIN_RUNS} runs "
                f"(models) on a suite; `{g.command}` fits any 2 or more"
            )
        else:
            try:
                g.fit = fit_stored(
                    store, [r for r in (store.get_run(x) for x in g.runs) if r], MODEL
                )
            except IrtError as e:
                g.note = f"suite {g.suite}: {e}"
        out.suites.append(g)
    if not groups:
        out.notes.append("no cell of this study has a run yet")
    return out


def render_abilities(s: SuiteIrt) -> Table:
    """Each cell's run: its ability (MAP) with the 95% interval, highest first."""
    assert s.fit is not None
    t = plain_table(
        title="ability per cell: theta (MAP) [95% CI]; 0 = the average run",
    )
    for c in ("cell", "model", "theta [95% CI]", "accuracy", "items"):
        t.add_column(c, no_wrap=True, overflow="ellipsis")
    for a in sorted(s.fit.abilities, key=lambda a: -a.theta):
        t.add_row(
            literal(s.cells.get(a.run_id, a.run_id)),
            literal(a.model),
            f"{a.theta:+.2f} {ci_text(a.ci)}",
            f"{a.accuracy:.3f}",
            str(a.n),
        )
    return t


def render_summary(s: SuiteIrt) -> Group:
    """Flagged items (likely label errors), the hardest, and the least discriminating."""
    from llmscope.analysis.irt import DOES_NOT_DISCRIMINATE, read_item

    assert s.fit is not None
    fit = s.fit
    out: list[Any] = [Text(f"WARNING: {w}", style="bold yellow") for w in fit.warnings]
    flagged = fit.flagged
    head = Text(f"likely label errors: {len(flagged)}", style="bold red" if flagged else "bold")
    head.append("  (discrimination's whole 95% interval below 0: check the gold)", style="dim")
    out.append(head)
    for i in flagged:
        out.append(
            Text.assemble(
                "  ",
                literal(i.item, "bold red"),
                f"  a {i.discrimination:+.2f} {ci_text(i.discrimination_ci)}  "
                f"b {i.difficulty:+.2f}  right {i.p_correct:.2f} of {i.n}",
            )
        )
    # an item that hardly discriminates can have any difficulty (b = +15 at a = 0.1): the
    # hardest are read among the items that do discriminate
    rising = [i for i in fit.items if i.discrimination >= DOES_NOT_DISCRIMINATE]
    hardest = sorted(rising, key=lambda i: -i.difficulty)[:N_LISTED]
    out.append(
        Text(
            f"hardest (highest difficulty b among items with a ≥ {DOES_NOT_DISCRIMINATE})",
            style="bold",
        )
    )
    for i in hardest:
        out.append(
            Text.assemble(
                "  ",
                literal(i.item),
                f"  b {i.difficulty:+.2f} {ci_text(i.difficulty_ci)}  ",
                (read_item(i).difficulty, "dim"),
            )
        )
    weakest = sorted((i for i in fit.items if not i.flagged), key=lambda i: i.discrimination)
    out.append(Text("least discriminating (lowest a, flagged items aside)", style="bold"))
    for i in weakest[:N_LISTED]:
        out.append(
            Text.assemble(
                "  ",
                literal(i.item),
                f"  a {i.discrimination:+.2f} {ci_text(i.discrimination_ci)}  ",
                (read_item(i).discrimination, "dim"),
            )
        )
    if fit.constant_items:
        out.append(
            Text(
                f"{len(fit.constant_items)} item(s) answered alike by every run: not fitted",
                style="dim",
            )
        )
    return Group(*out)


ITEM_SORTS = ("flag", "difficulty", "discrimination")


def item_rows(fit: IrtFit, sort: str) -> list[ItemParams]:
    """The fitted items in a screen's order: flagged first then lowest discrimination ("flag"),
    hardest first ("difficulty"), or lowest discrimination first ("discrimination")."""
    if sort == "difficulty":
        return sorted(fit.items, key=lambda i: -i.difficulty)
    if sort == "discrimination":
        return sorted(fit.items, key=lambda i: i.discrimination)
    return sorted(fit.items, key=lambda i: (not i.flagged, i.discrimination))
