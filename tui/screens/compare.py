"""Compare: any number of runs as a runs x metrics matrix, every pair's paired difference,
and the items they disagree on (tui/panels/compare.py computes; this screen shows)."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Header, Label, Static

from llmscope.tui.messages import CompareLoaded
from llmscope.tui.panels.compare import (
    DIS_SORTS,
    CompareMatrix,
    compare_matrix,
    disagreement_rows,
    render_matrix,
    render_pairs,
    sort_disagreements,
)
from llmscope.tui.screens.base import BackScreen
from llmscope.tui.screens.item import ItemScreen
from llmscope.tui.widgets import ITEM_KEY_COLUMNS, ItemList

DIS_COLUMNS = [
    *ITEM_KEY_COLUMNS,
    ("pair", "runs A→B", 18),
    ("diff_s", "Δ", 5),
    ("prediction_a", "pred A", 10),
    ("prediction_b", "pred B", 10),
    ("gold_a", "gold", 8),
    ("text", "text", 0),
]


class CompareScreen(BackScreen):
    """Runs x metrics, every pair's paired Δ accuracy, and the items the runs disagree on."""

    BINDINGS = [
        Binding("d", "definitions", "Definitions", show=False),
        Binding("o", "order", "Sort items"),
    ]
    DEFAULT_CSS = """
    CompareScreen #cmp-top { height: auto; max-height: 50%; }
    """

    def __init__(self, run_ids: list[str], labels: dict[str, str] | None = None) -> None:
        super().__init__()
        self.run_ids = run_ids
        self.labels = labels  # a study's cell names by run id (two cells of one model read apart)
        self.matrix: CompareMatrix | None = None
        self.sort = DIS_SORTS[0]
        self._rows: list[dict] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label(
            f"Compare {len(self.run_ids)} runs (every pair, numbers as `llmscope compare`)",
            classes="title",
        )
        with VerticalScroll(id="cmp-top"):
            yield Static("loading ...", id="cmp-matrix")
            yield Static("", id="cmp-tests")
        yield Static("", id="dis-title")
        yield Static(ItemList(DIS_COLUMNS).header(), id="dis-head")
        yield ItemList(DIS_COLUMNS, id="dis")
        yield Footer()

    def on_screen_resume(self) -> None:
        """Back from a drill-down (or anything pushed on top): the list it was opened from has focus."""
        self.query_one("#dis", ItemList).focus()

    def on_mount(self) -> None:
        lst = self.query_one("#dis", ItemList)
        lst.header_widget = self.query_one("#dis-head", Static)
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="compare")
    def load(self) -> CompareLoaded:
        with self.llm_app.handle.use() as store:
            m = compare_matrix(store, self.run_ids)
        return CompareLoaded({"matrix": m})

    def on_compare_loaded(self, msg: CompareLoaded) -> None:
        m: CompareMatrix = msg.data["matrix"]
        self.matrix = m
        self.query_one("#cmp-matrix", Static).update(render_matrix(m, self.size.width, self.labels))
        self.query_one("#cmp-tests", Static).update(render_pairs(m))
        self._rows = disagreement_rows(m)
        self._show_items()
        self.query_one("#dis", ItemList).focus()

    def _show_items(self) -> None:
        rows = sort_disagreements(self._rows, self.sort)
        cols: dict[str, list] = {
            k: [r.get(k) for r in rows] for k, _, _ in DIS_COLUMNS if k != "diff_s"
        }
        cols["diff_s"] = [f"{r['diff']:+.2g}" for r in rows]
        cols["a"] = [r["a"] for r in rows]
        cols["b"] = [r["b"] for r in rows]
        lst = self.query_one("#dis", ItemList)
        lst.set_data(cols)
        lst.cursor = 0
        lst.scroll_home(animate=False)  # a new order starts at its top
        t = Text(f"Items the runs disagree on: {len(rows)}", style="bold")
        t.append(f"   sort: {self.sort} (o)   Enter: both runs side by side", style="dim")
        self.query_one("#dis-title", Static).update(t)

    def action_order(self) -> None:
        self.sort = DIS_SORTS[(DIS_SORTS.index(self.sort) + 1) % len(DIS_SORTS)]
        self._show_items()

    def on_item_list_opened(self, event: ItemList.Opened) -> None:
        r = event.row
        self.app.push_screen(ItemScreen([r["a"], r["b"]], r["item_id"], nav=event.item_list))
