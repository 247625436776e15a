"""Screens of the llmscope TUI, one module per screen: Home, Dashboard, Item, Compare, Help.

The old `llmscope.tui.screens` names stay importable from here.
"""

from __future__ import annotations

from llmscope.tui.messages import CompareLoaded, DashData, ItemLoaded, RunsLoaded, SuitesLoaded
from llmscope.tui.screens.base import BackScreen, BaseScreen, _duration, _fmt_time, _set
from llmscope.tui.screens.compare import DIS_COLUMNS, CompareScreen
from llmscope.tui.screens.dashboard import FAIL_COLUMNS, DashboardScreen
from llmscope.tui.screens.help import HELP, DefinitionsScreen, HelpScreen
from llmscope.tui.screens.home import HomeScreen
from llmscope.tui.screens.item import ItemScreen, render_item

__all__ = [
    "DIS_COLUMNS",
    "FAIL_COLUMNS",
    "HELP",
    "BackScreen",
    "BaseScreen",
    "CompareLoaded",
    "CompareScreen",
    "DashData",
    "DashboardScreen",
    "DefinitionsScreen",
    "HelpScreen",
    "HomeScreen",
    "ItemLoaded",
    "ItemScreen",
    "RunsLoaded",
    "SuitesLoaded",
    "_duration",
    "_fmt_time",
    "_set",
    "render_item",
]
