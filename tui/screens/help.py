"""Help: the keys of every screen."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from llmscope.tui.definitions import definitions_table

# (section, [(keys, what they do)]): one key per row, its description wrapped beside it, so
# two keys' descriptions never interleave at any width (they did at 80 and 160 columns).
KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "Everywhere",
        [
            ("F1 or ?", "this help"),
            ("ctrl+q", "quit"),
            ("ctrl+p", "command palette (every action)"),
            ("escape", "back to the list you came from"),
            ("mouse", "click rows, scroll with the wheel, click buttons"),
        ],
    ),
    (
        "Home",
        [
            ("enter", "open the run under the cursor (live while it runs)"),
            ("space", "mark a run for comparison"),
            ("c", "compare the marked runs"),
            ("n", "go to the new-run form (not in `llmscope view`, which only watches)"),
            ("r", "refresh the run list"),
            ("S", "studies in this database (enter opens one's matrix)"),
            ("escape", "leave the form for the runs list"),
            ("tab", "move between runs, suites and the form; enter in a suite fills the form"),
            ("form", "takes every `llmscope run` option; a bad value is named beside its field"),
        ],
    ),
    (
        "Dashboard",
        [
            ("up down pgup pgdn home end", "move in the failing-items list"),
            ("enter", "open the item"),
            ("s", "cycle sort (arrival, confidence, distance to humans, group)"),
            ("g", "cycle group filter"),
            ("f", "cycle minimum confidence"),
            ("x", "stop a run started in this window"),
            ("m", "methods: scoring schemes, human fit, order effects, plan"),
            ("d", "what each number means (or hover a panel)"),
            (
                "w",
                "write the run's page and this panel's figure to files (the notification gives the paths)",
            ),
            ("v", "next panel (below 100 columns one panel shows at a time)"),
            ("h", "human vs model side by side"),
            ("p", "plots (accuracy/throughput over the run, reliability, positions)"),
        ],
    ),
    (
        "Item",
        [
            ("n / p", "next / previous item of the list without going back"),
            ("up down pgup pgdn", "scroll"),
        ],
    ),
    (
        "Study",
        [
            ("arrows", "move between cells; the cell's run, exact value and interval show below"),
            ("enter", "open the cell's run (live while it runs)"),
            (
                "f / g",
                "next factor across (columns) / down (rows): model, suite, the grid's factors",
            ),
            ("t", "swap rows and columns"),
            ("s", "other factors: stacked in the rows, or held at one level"),
            ("v", "next level of the held factors"),
            ("[ / ]", "previous / next columns when they do not fit the window"),
            ("space", "mark a cell; M marks its whole row"),
            (
                "c",
                "compare the marked cells: two open the compare screen; more list every pair "
                "on one suite with Holm-adjusted p-values",
            ),
            (
                "i",
                "item response theory of the study's runs: each cell's ability with its interval, "
                "likely label errors, the hardest and least discriminating items",
            ),
            ("r", "refresh"),
        ],
    ),
    (
        "Study IRT",
        [
            ("enter", "open the item's drill-down (its IRT reading and every cell run's answer)"),
            ("o", "sort items: flagged first / hardest first / least discriminating first"),
            ("u", "next suite of the study"),
        ],
    ),
    (
        "Compare",
        [
            ("enter", "open a disagreement (both runs' answers side by side)"),
            ("o", "sort disagreements: largest difference first / by item id"),
        ],
    ),
]
WATCHING = (
    "Another process writing this database (a run or a study in another terminal): every "
    "screen shows its stored rows as of its last commit (the title names the writer); "
    "`llmscope view` opens the same window read-only."
)


def _plain() -> str:
    lines = ["llmscope — keys", ""]
    for section, keys in KEYS:
        for i, (k, what) in enumerate(keys):
            lines.append(f"{section if i == 0 else '':<14} {k:<12} {what}")
        lines.append("")
    return "\n".join([*lines, WATCHING, ""])


HELP = _plain()  # the same keys as plain text


def help_table() -> Table:
    """The keys of every screen: section, key, what it does (wrapped in its own column)."""
    t = Table(box=None, show_header=False, padding=(0, 1), expand=True)
    t.add_column("section", style="bold", no_wrap=True)
    t.add_column("keys", style="cyan", max_width=14)
    t.add_column("what", ratio=1)
    for j, (section, keys) in enumerate(KEYS):
        if j:
            t.add_row("", "", "")
        for i, (k, what) in enumerate(keys):
            t.add_row(section if i == 0 else "", k, what)
    return t


class HelpScreen(ModalScreen[None]):
    """The keys of every screen, then the definition of each metric on the screen below."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
    ]

    def __init__(self, metrics: list[str] | None = None) -> None:
        super().__init__()
        self.metrics = metrics or []

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            with VerticalScroll(id="help-scroll"):
                yield Static(Text("llmscope — keys", style="bold"))
                yield Static(help_table(), id="help-text")
                yield Static(Text(WATCHING, style="dim"))
                if self.metrics:
                    yield Static(Text("Metrics on this screen (docs/METRICS.md)", style="bold"))
                    yield Static(definitions_table(self.metrics), id="help-metrics")
            yield Button("Close", id="help-close")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss()


class DefinitionsScreen(ModalScreen[None]):
    """`d`: the one-line definition of every metric the screen below shows, from the
    metrics pipeline's registry (the text `llmscope report --explain` prints)."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("d", "dismiss", "Close", show=False),
        Binding("q", "dismiss", "Close", show=False),
        # A modal screen cuts the app's `?` off (its F1 is a priority key and still works).
        Binding("question_mark", "app.help", "Help"),
    ]

    def __init__(self, metrics: list[str]) -> None:
        super().__init__()
        self.metrics = metrics

    def compose(self) -> ComposeResult:
        with Vertical(id="defs-box"):
            with VerticalScroll(id="defs-scroll"):
                yield Static(Text("What the numbers on this screen mean", style="bold"))
                if self.metrics:
                    yield Static(definitions_table(self.metrics), id="defs-table")
                else:
                    yield Static(Text("no metric on this screen yet", style="dim"))
            yield Button("Close", id="defs-close")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss()
