"""Compare: runs side by side with paired tests, and the items they disagree on."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Label, Static

from llmscope.tui.messages import CompareLoaded
from llmscope.tui.model import compare_runs
from llmscope.tui.screens.base import BaseScreen
from llmscope.tui.screens.item import ItemScreen
from llmscope.tui.widgets import ItemList, ci_bar, fmt, literal

DIS_COLUMNS = [
    ("item_id", "item", 12),
    ("variant", "variant", 8),
    ("b", "vs run", 13),
    ("prediction_a", "pred A", 10),
    ("prediction_b", "pred B", 10),
    ("gold_a", "gold", 8),
    ("text", "text", 0),
]


class CompareScreen(BaseScreen):
    """Runs side by side with paired tests, and the items they disagree on."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, run_ids: list[str]) -> None:
        super().__init__()
        self.run_ids = run_ids

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label(
            "Compare (first run = A; each other run B is tested against it)", classes="title"
        )
        yield DataTable(id="cmp-table", cursor_type="row")
        yield Static("", id="cmp-tests")
        yield Static("", id="dis-title")
        yield Static(ItemList(DIS_COLUMNS).header(), id="dis-head")
        yield ItemList(DIS_COLUMNS, id="dis")
        yield Footer()

    def on_mount(self) -> None:
        t = self.query_one("#cmp-table", DataTable)
        t.add_columns("run", "model", "status", "n", "errors", "accuracy", "95% CI")
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="compare")
    def load(self) -> None:
        with self.llm_app.handle.use() as store:
            data = compare_runs(store, self.run_ids)
        self.post_message(CompareLoaded(data))

    def on_compare_loaded(self, msg: CompareLoaded) -> None:
        d = msg.data
        t = self.query_one("#cmp-table", DataTable)
        for r in d["table"]:
            t.add_row(
                literal(r["run_id"]),
                literal(str(r["model"])[:40]),
                literal(r["status"]),
                str(r["n"]),
                str(r["errors"]),
                fmt(r["accuracy"]),
                ci_bar(r["accuracy"], r["lo"], r["hi"], 24),
            )
        s = Text()
        if not d["same_suite"]:
            s.append(
                "warning: these runs are on different suites; paired tests use items with the same id\n",
                style="yellow",
            )
        for x in d["tests"]:
            s.append(f"{x['b']} vs {x['a']}: ", style="bold")
            mp = "-" if x["p"] is None else f"{x['p']:.4g}"
            s.append(
                f"Δacc {x['diff']:+.3f} [{x['lo']:+.3f}, {x['hi']:+.3f}] p={x['p_value']:.4g}  "
                f"n={x['n']} clusters={x['n_clusters']}   McNemar "
                f"b={x['b_only_a']} c={x['c_only_b']} p={mp} ({x['method']})\n"
            )
        self.query_one("#cmp-tests", Static).update(s)
        dis = d["disagreements"]
        cols = {k: [r.get(k) for r in dis] for k, _, _ in DIS_COLUMNS}
        cols["a"] = [r.get("a") for r in dis]
        lst = self.query_one("#dis", ItemList)
        lst.set_data(cols)
        self.query_one("#dis-title", Static).update(
            Text(f"Items they disagree on: {len(dis)}", style="bold")
        )
        lst.focus()

    def on_item_list_opened(self, event: ItemList.Opened) -> None:
        r = event.row
        self.app.push_screen(ItemScreen([r["a"], r["b"]], r["item_id"], nav=event.item_list))

