"""A study's item response theory (key `i` on the study screen): per suite, each cell's ability
with its interval, the items flagged as likely label errors, the hardest and the least
discriminating items, and every fitted item in a list; Enter opens an item's drill-down.

The fit is `llmscope irt --runs <the cells' runs>` (tui/panels/irt.py calls
`llmscope.analysis.irt.fit_stored` in a worker; this screen only draws)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Header, Static

from llmscope.studies.store import CellRow
from llmscope.tui.panels.irt import (
    ITEM_SORTS,
    StudyIrt,
    StudyIrtLoaded,
    SuiteIrt,
    ci_text,
    item_rows,
    render_abilities,
    render_summary,
    study_irt,
)
from llmscope.tui.screens.base import BackScreen
from llmscope.tui.widgets import ITEM_KEY_COLUMNS, ItemList, literal

__all__ = ["StudyIrtScreen"]

ITEM_COLUMNS = [
    *ITEM_KEY_COLUMNS,
    ("b", "difficulty b [95% CI]", 22),
    ("a", "discrimination a [95% CI]", 25),
    ("right", "right", 6),
    ("reading", "reading", 0),
]


class StudyIrtScreen(BackScreen):
    """A study's IRT, one suite at a time (`u` steps through the suites)."""

    BINDINGS = [
        Binding("u", "next_suite", "Next suite"),
        Binding("o", "order", "Sort items"),
    ]
    DEFAULT_CSS = """
    StudyIrtScreen #irt-top { height: auto; max-height: 60%; }
    StudyIrtScreen #irt-title { padding: 0 1; }
    """

    def __init__(self, study: str, rows: list[CellRow]) -> None:
        super().__init__()
        self.study = study
        self.rows = rows
        self.result: StudyIrt | None = None
        self.suite_index = 0
        self.sort = ITEM_SORTS[0]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(
            Text(f"Study {self.study}: item response theory (2PL)", style="bold"), id="irt-title"
        )
        with VerticalScroll(id="irt-top"):
            yield Static("fitting ... (in the background)", id="irt-summary")
            yield Static("", id="irt-abilities")
        yield Static("", id="irt-items-title")
        yield Static(ItemList(ITEM_COLUMNS).header(), id="irt-items-head")
        yield ItemList(ITEM_COLUMNS, id="irt-items")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#irt-items", ItemList).header_widget = self.query_one(
            "#irt-items-head", Static
        )
        self.load()

    def on_screen_resume(self) -> None:
        self.query_one("#irt-items", ItemList).focus()

    @work(thread=True, exclusive=True, exit_on_error=False, group="study-irt")
    def load(self) -> StudyIrtLoaded:
        with self.llm_app.handle.use() as store:
            return StudyIrtLoaded(study_irt(store, self.study, self.rows))

    def on_study_irt_loaded(self, msg: StudyIrtLoaded) -> None:
        self.result = msg.result
        self._show()

    def current(self) -> SuiteIrt | None:
        r = self.result
        if r is None or not r.suites:
            return None
        return r.suites[self.suite_index % len(r.suites)]

    def _show(self) -> None:
        r = self.result
        s = self.current()
        title = Text(f"Study {self.study}: item response theory (2PL)", style="bold")
        if r is not None and len(r.suites) > 1:
            title.append(
                f"   suite {self.suite_index % len(r.suites) + 1} of {len(r.suites)} (u)",
                style="yellow",
            )
        if s is not None:
            title.append(f"\nsuite {s.suite}: {len(s.runs)} cell runs", style="bold")
            if s.fit is not None:
                title.append(f", {len(s.fit.items)} items fitted   (= {s.command})", style="dim")
        self.query_one("#irt-title", Static).update(title)
        notes = [literal(n, "yellow") for n in (r.notes if r else [])]
        top = self.query_one("#irt-summary", Static)
        abilities = self.query_one("#irt-abilities", Static)
        if s is None or s.fit is None:
            if s is not None:
                notes.append(literal(s.note, "yellow"))
            top.update(Group(*notes) if notes else Text(""))
            abilities.update("")
            self._fill([])
            return
        top.update(Group(*notes, render_summary(s)))
        abilities.update(render_abilities(s))
        self._fill(item_rows(s.fit, self.sort))

    def _fill(self, items: list[Any]) -> None:
        from llmscope.analysis.irt import read_item

        lst = self.query_one("#irt-items", ItemList)
        lst.set_data(
            {
                "item_id": [i.item_id for i in items],
                "variant": [i.variant for i in items],
                "b": [f"{i.difficulty:+.2f} {ci_text(i.difficulty_ci)}" for i in items],
                "a": [f"{i.discrimination:+.2f} {ci_text(i.discrimination_ci)}" for i in items],
                "right": [f"{i.p_correct:.2f}" for i in items],
                "reading": [read_item(i).text for i in items],
            }
        )
        lst.cursor = 0
        lst.scroll_home(animate=False)
        t = Text(f"items: {len(items)}", style="bold")
        t.append(f"   sort: {self.sort} (o)   Enter: the item's drill-down", style="dim")
        self.query_one("#irt-items-title", Static).update(t)
        lst.focus()

    def action_next_suite(self) -> None:
        if self.result is None or len(self.result.suites) < 2:
            self.notify("this study has one suite", severity="information")
            return
        self.suite_index = (self.suite_index + 1) % len(self.result.suites)
        self._show()

    def action_order(self) -> None:
        self.sort = ITEM_SORTS[(ITEM_SORTS.index(self.sort) + 1) % len(ITEM_SORTS)]
        self._show()

    def on_item_list_opened(self, event: ItemList.Opened) -> None:
        """The item's drill-down over the cells' runs, highest ability first, with this fit."""
        from llmscope.tui.screens.item import ItemScreen

        s = self.current()
        if s is None or s.fit is None:
            return
        order = [a.run_id for a in sorted(s.fit.abilities, key=lambda a: -a.theta)]
        scope = f"the {len(s.runs)} cell runs of study {self.study} on suite {s.suite}"
        self.app.push_screen(
            ItemScreen(
                order,
                str(event.row["item_id"]),
                nav=event.item_list,
                irt_runs=list(s.runs),
                irt_scope=scope,
            )
        )
