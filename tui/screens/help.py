"""Help: the keys of every screen."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

HELP = """\
llmscope — keys

Everywhere     ?  this help        ctrl+q  quit        escape  back
               mouse: click rows, scroll with the wheel, click buttons

Home           enter  open the run under the cursor (live while it runs)
               space  mark a run for comparison      c  compare the marked runs
               n  go to the new-run form             r  refresh the run list
               tab  move between runs, suites and the form; enter in a suite fills the form
               the form takes every `llmscope run` option; task options are checked as you type

Dashboard      up/down/pgup/pgdn/home/end  move in the failing-items list
               enter  open the item                  s  cycle sort (arrival, confidence,
               g  cycle group filter                    distance to humans, group)
               f  cycle minimum confidence           x  stop a run started in this window
               m  methods: scoring schemes, human fit, order effects, plan
               h  human vs model side by side        v  plots (accuracy/throughput over
                                                        the run, reliability, positions)

Item           n / p  next / previous item of the list without going back
               up/down/pgup/pgdn  scroll

Compare        enter  open a disagreement (both runs' answers side by side)
               o  sort disagreements: largest difference first / by item id

Watching another process (`llmscope view`): progress and results come from the live
channel beside the database; the database is opened read-only once the run has ended.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static(Text(HELP), id="help-text")
            yield Button("Close", id="help-close")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss()
