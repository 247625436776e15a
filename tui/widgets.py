"""Widgets: a virtual item list (Line API), plotext plots, and literal-text helpers."""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from typing import Any

import numpy as np
from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual_plotext import PlotextPlot

from llmscope.analysis.numbers import fmt_num

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Bidirectional controls: embeddings/overrides (U+202A-202E), isolates (U+2066-2069), the
# LRM/RLM/ALM marks. A bidi terminal reorders text around them ("\u202egnp.exe" reads
# "exe.png"), so what is shown would not be what is stored.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def clean(s: Any) -> str:
    """Item text made safe for a terminal: control characters (ANSI ESC included) become
    visible escapes such as `\\x1b`, so an item can neither colour nor move the screen, and
    bidi controls become `<U+202E>`, so an item cannot reorder what is shown. Stored data is
    unchanged; every place the TUI draws item or response text goes through this."""
    if s is None:
        return ""
    s = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(s))
    return _BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", s)


def literal(s: Any, style: str = "") -> Text:
    """A Text that shows `s` exactly: no Rich markup parsing, control characters escaped."""
    return Text(clean(s), style=style)


def plain_table(title: str = "", **kw: Any) -> Table:
    """A borderless Table with bold headers and a left-aligned title: the panels' usual table."""
    opts: dict[str, Any] = {
        "box": None,
        "padding": (0, 1),
        "header_style": "bold",
        "title_justify": "left",
    }
    opts.update(kw)
    return Table(title=title or None, **opts)


def ellipsis(s: Any, n: int) -> str:
    """``s`` in at most ``n`` characters, ending in "…" where it was cut (a cut never silent)."""
    s = str(s)
    return s if len(s) <= n else s[: max(n - 1, 0)] + "…"


# list columns shown side by side whose values are read against each other (gold vs prediction)
DIFF_PAIRS = {
    "gold": "prediction",
    "prediction": "gold",
    "gold_a": "prediction_a",
    "prediction_a": "prediction_b",
    "prediction_b": "prediction_a",
}


def cut_where_differs(s: str, other: str, n: int) -> str:
    """``s`` in at most ``n`` characters; when ``s`` and ``other`` share a prefix longer than
    the room, the part where they start to differ, between ellipses ("…t landed"), so two
    long answers cut to the same prefix still read apart."""
    if len(s) <= n or n < 4:
        return ellipsis(s, n)
    k = 0
    while k < min(len(s), len(other)) and s[k] == other[k]:
        k += 1
    if k < n - 2:  # the difference shows before the cut
        return ellipsis(s, n)
    body = s[max(1, k - 2) :]  # two characters of context before the first difference
    return "…" + (body if len(body) <= n - 1 else body[: n - 2] + "…")


def fmt(x: Any, digits: int | None = None, metric: str | None = None) -> str:
    """A number as every surface prints it (`analysis/numbers.py`): by the rule for `metric`
    (counts as integers), or with `digits` decimals where a column shares one scale."""
    return fmt_num(x, metric, decimals=digits)


def bar(p: float | None, width: int = 20, ch: str = "█") -> str:
    """A horizontal bar for a value in [0, 1]."""
    if p is None or not math.isfinite(p):
        return " " * width
    n = max(0, min(width, round(p * width)))
    return ch * n + "·" * (width - n)


def ci_bar(mean: float, lo: float, hi: float, width: int = 24) -> Text:
    """`----[===|===]----`: the interval as a band and the estimate as a tick on [0, 1]."""
    t = Text()
    if not all(map(math.isfinite, (mean, lo, hi))):
        return Text(" " * width)
    a = max(0, min(width - 1, int(lo * (width - 1) + 0.5)))
    b = max(0, min(width - 1, int(hi * (width - 1) + 0.5)))
    m = max(0, min(width - 1, int(mean * (width - 1) + 0.5)))
    for i in range(width):
        if i == m:
            t.append("┃", style="bold")
        elif a <= i <= b:
            t.append("━", style="cyan")
        else:
            t.append("─", style="dim")
    return t


# -- item list -------------------------------------------------------------------------------
SORTS = ("arrival", "confidence", "distance", "group", "item")


def item_sort_key(item_id: Any) -> tuple[int, int, str]:
    """Item ids in numeric order when they are whole numbers (10, 141, 1003), then the rest as
    text: the same order as `Store.failing_page(sort="item")` (TRY_CAST to BIGINT, NULLS LAST)."""
    s = str(item_id)
    try:
        return (0, int(s), s)
    except ValueError:
        return (1, 0, s)


def fit_widths(
    widths: list[int], total: int, min_rest: int = 24, keep: frozenset[int] = frozenset()
) -> list[int]:
    """Column widths for a `total`-cell line: fixed columns (width > 0) shrink, the widest
    first and never below 4 cells, until the rest column (width 0) has `min_rest` cells or a
    third of the line, so item text stays readable on an 80-column terminal. The columns at
    the positions in `keep` (the item id) shrink only once the others are down to 4 cells."""
    out = list(widths)
    want = max(min_rest, total // 3) if 0 in out else 0
    while sum(w + 1 for w in out if w) + want > total:
        free = [j for j in range(len(out)) if j not in keep and out[j] > 4]
        i = max(free or range(len(out)), key=lambda j: out[j])
        if out[i] <= 4:
            break
        out[i] -= 1
    return out


# The columns every item list starts with (an item and its prompt variant), as (key, title, width)
ITEM_KEY_COLUMNS = [("item_id", "item", 12), ("variant", "variant", 8)]


class ItemList(ScrollView, can_focus=True):
    """A list of result rows drawn line by line: only visible lines are rendered, and
    rendered lines are cached, so 100,000 rows scroll as fast as 100.

    Data is a dict of equal-length column lists (`set_data`); sorting and filtering
    produce an index array, never a copy of the rows. Or a row source (`set_source`, e.g.
    `tui.pages.FailingSource`) that sorts, filters and serves pages from DuckDB: then only
    the pages shown are held (`PAGE` rows each, the last `MAX_PAGES` kept).
    """

    PAGE = 200
    MAX_PAGES = 50

    DEFAULT_CSS = """
    ItemList { height: 1fr; }
    """
    BINDINGS = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "Top", show=False),
        Binding("end", "jump(-1)", "Bottom", show=False),
        Binding("enter", "open", "Open item"),
    ]

    cursor = reactive(0, always_update=True, repaint=False)

    class Opened(Message):
        """Enter or a second click on a row."""

        def __init__(self, item_list: ItemList, row: dict[str, Any]) -> None:
            super().__init__()
            self.item_list = item_list
            self.row = row

        @property
        def control(self) -> ItemList:
            return self.item_list

    def __init__(self, columns: list[tuple[str, str, int]], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.columns = columns  # (key, title, width); width 0 = the rest
        self.optional: frozenset[str] = frozenset()  # keys shown only on wide terminals (widths)
        self.data: dict[str, list[Any]] = {}
        self.n_total = 0
        self.order = np.zeros(0, dtype=np.int64)
        self.sort_key = "arrival"
        self.descending = False
        self.group_filter: str | None = None
        self.min_conf: float | None = None
        self.scope = (
            "failing"  # failing rows, all rows, or flagged rows (data: "failing"/"flagged" columns)
        )
        self._cache: OrderedDict[tuple[int, bool, int], Strip] = OrderedDict()
        self.source: Any = None  # a FailingSource-like object, or None for in-memory data
        self._n = 0  # rows after filters, source mode
        self._pages: OrderedDict[int, dict[str, list[Any]]] = OrderedDict()
        self._loading: set[int] = set()
        self._gen = 0  # bumped when the view changes, so late pages of the old view are dropped
        self.header_widget: Any = (
            None  # a Static showing `header()`, redrawn when the width changes
        )
        self.id_width = 0  # the longest item id seen: the item column widens to show it whole

    # -- data -------------------------------------------------------------------------------
    def set_columns(
        self, columns: list[tuple[str, str, int]], optional: set[str] | frozenset[str] = frozenset()
    ) -> None:
        """Show these columns (key, title, width; width 0 = the rest) from now on; the
        `optional` ones only on terminals at least `OPTIONAL_MIN_WIDTH` cells wide."""
        self.columns = columns
        self.optional = frozenset(optional)
        self._cache.clear()
        self.virtual_size = Size(self._line_width(), self._len())
        if self.header_widget is not None:
            self.header_widget.update(self.header())
        self.refresh()

    def set_data(self, data: dict[str, list[Any]]) -> None:
        key = self.current_key()
        self.source = None
        self._gen += 1
        self._pages.clear()
        self.data = data
        self.n_total = len(next(iter(data.values()))) if data else 0
        self._see_ids(data.get("item_id") or [])
        self._apply(key)

    def current_key(self) -> tuple[str, str] | None:
        row = self.current_row()
        return (row["item_id"], row["variant"]) if row else None

    def set_view(
        self,
        *,
        sort: str | None = None,
        group: str | None | bool = False,
        min_conf: float | None | bool = False,
        scope: str | None = None,
    ) -> None:
        """Change sort and filters; the list then shows its first row (cursor and scroll at the top)."""
        if scope is not None:
            self.scope = scope
            if self.source is not None:
                self.source.scope = scope
        if sort is not None:
            self.sort_key = sort
        if group is not False:
            self.group_filter = group  # type: ignore[assignment]
        if min_conf is not False:
            self.min_conf = min_conf  # type: ignore[assignment]
        if self.source is not None:
            self._apply_source(None, top=True)
        else:
            self._apply(None)
        self.scroll_home(animate=False, immediate=True)

    def set_source(self, source: Any) -> None:
        """Show rows served by `source` (set_view / page / position / n_all) instead of data."""
        key = self.current_key()
        self.source = source
        source.scope = self.scope
        self.data = {}
        self.order = np.zeros(0, dtype=np.int64)
        self._apply_source(key)

    def _apply_source(self, keep: tuple[str, str] | None, top: bool = False) -> None:
        src = self.source
        self._n = int(src.set_view(self.sort_key, self.group_filter, self.min_conf))
        self.n_total = int(src.n_all)
        self._gen += 1
        self._loading.clear()
        self._pages.clear()
        self._cache.clear()
        pos = src.position(keep) if keep is not None and self._n else None
        if pos is None:
            pos = 0 if top else (min(self.cursor, self._n - 1) if self._n else 0)
        self.virtual_size = Size(self._line_width(), self._n)
        self.cursor = max(0, pos)
        self.refresh()

    def _page_ready(self, pos: int) -> bool:
        """Whether the page holding `pos` is loaded; if not, fetch it (and the next one) in a
        thread so drawing never waits on DuckDB. `row()` stays synchronous for callers that
        need the data now (the cursor's row, navigation)."""
        first = pos - pos % self.PAGE
        for f in (first, first + self.PAGE):
            if f < self._len() and f not in self._pages and f not in self._loading:
                self._loading.add(f)
                self.run_worker(
                    partial(self._fetch_page, f, self._gen),
                    thread=True,
                    group="item-pages",
                    exit_on_error=False,
                )
        return first in self._pages

    def _fetch_page(self, first: int, gen: int) -> None:
        src = self.source
        page = src.page(first, self.PAGE) if src is not None else {}
        self.app.call_from_thread(self._page_loaded, first, page, gen)

    def _page_loaded(self, first: int, page: dict[str, list[Any]], gen: int) -> None:
        self._loading.discard(first)
        if gen != self._gen or self.source is None:
            return  # the view changed meanwhile
        self._pages[first] = page
        if len(self._pages) > self.MAX_PAGES:
            self._pages.popitem(last=False)
        self._see_ids(page.get("item_id") or [])
        self.refresh()

    # Item ids (WorldSense: 20 digits with a sign) once showed their first 12 characters and
    # nothing said they were cut: the column takes the longest id seen, up to this many cells;
    # a longer one ends in "…".
    ID_MAX = 24

    def _see_ids(self, ids: list[Any]) -> None:
        longest = max((len(str(i)) for i in ids), default=0)
        if longest > self.id_width:
            self.id_width = longest
            self._cache.clear()
            if self.header_widget is not None:
                self.header_widget.update(self.header())

    def _len(self) -> int:
        return self._n if self.source is not None else len(self.order)

    def _apply(self, keep: tuple[str, str] | None) -> None:
        d = self.data
        n = len(next(iter(d.values()))) if d else 0
        idx = np.arange(n, dtype=np.int64)
        if n and self.scope in d:  # "failing" / "flagged": a bool column per row
            idx = idx[np.asarray(d[self.scope], dtype=bool)[idx]]
        self.n_total = len(idx)  # the scope's rows, before the group and confidence filters
        if n and self.group_filter is not None and "group" in d:
            g = np.asarray(d["group"], dtype=object)
            idx = idx[g[idx] == self.group_filter]
        if n and self.min_conf is not None and "confidence" in d:
            c = np.asarray(d["confidence"], dtype=float)
            idx = idx[np.nan_to_num(c[idx], nan=-1.0) >= self.min_conf]
        if n and len(idx):
            if self.sort_key == "confidence" and "confidence" in d:
                c = np.nan_to_num(np.asarray(d["confidence"], dtype=float)[idx], nan=-1.0)
                idx = idx[np.argsort(-c, kind="stable")]
            elif self.sort_key == "distance" and "distance" in d:
                c = np.nan_to_num(np.asarray(d["distance"], dtype=float)[idx], nan=-1.0)
                idx = idx[np.argsort(-c, kind="stable")]
            elif self.sort_key == "group" and "group" in d:
                g = np.asarray(d["group"], dtype=object)[idx].astype(str)
                idx = idx[np.argsort(g, kind="stable")]
            elif self.sort_key == "item" and "item_id" in d:
                item_ids = d["item_id"]
                idx = np.asarray(
                    sorted(idx.tolist(), key=lambda i: item_sort_key(item_ids[i])), dtype=np.int64
                )
        self.order = idx
        self._cache.clear()
        pos = 0
        if keep is not None and len(idx):
            ids = np.asarray(d["item_id"], dtype=object)[idx]
            vs = np.asarray(d["variant"], dtype=object)[idx]
            hit = np.flatnonzero((ids == keep[0]) & (vs == keep[1]))
            pos = int(hit[0]) if len(hit) else min(self.cursor, len(idx) - 1)
        self.virtual_size = Size(self._line_width(), len(idx))
        self.cursor = max(0, pos)
        self.refresh()

    def _line_width(self) -> int:
        return sum(w + 1 for _, _, w in self.columns if w) + 40

    def row(self, pos: int) -> dict[str, Any] | None:
        if not 0 <= pos < self._len():
            return None
        if self.source is not None:
            first = pos - pos % self.PAGE
            page = self._pages.get(first)
            if page is None:
                page = self.source.page(first, self.PAGE)
                self._pages[first] = page
                if len(self._pages) > self.MAX_PAGES:
                    self._pages.popitem(last=False)
                ids = page.get("item_id") or []
                if max((len(str(i)) for i in ids), default=0) > self.id_width:
                    self.call_after_refresh(self._see_ids, ids)  # not while a line is drawn
            else:
                self._pages.move_to_end(first)
            j = pos - first
            return (
                {k: v[j] for k, v in page.items()}
                if page and j < len(next(iter(page.values())))
                else None
            )
        i = int(self.order[pos])
        return {k: v[i] for k, v in self.data.items()}

    def current_row(self) -> dict[str, Any] | None:
        return self.row(self.cursor)

    @property
    def count(self) -> int:
        return self._len()

    # Below this many cells the optional columns (a task's declared extras) are left out, so
    # the list's own columns stay readable on an 80-column terminal.
    OPTIONAL_MIN_WIDTH = 100

    def widths(self, width: int | None = None) -> list[int]:
        """The column widths used at `width` cells (default: the widget's width); -1: not shown."""
        total = self.size.width if width is None else width
        hide = 0 < total < self.OPTIONAL_MIN_WIDTH
        ws = [
            -1
            if hide and k in self.optional
            else max(4, min(self.id_width, self.ID_MAX))
            if k == "item_id" and w > 0 and self.id_width
            else w
            for k, _, w in self.columns
        ]
        keys = [k for (k, _, _), w in zip(self.columns, ws, strict=True) if w >= 0]
        keep = frozenset(j for j, k in enumerate(keys) if k == "item_id")
        shown = (
            fit_widths([w for w in ws if w >= 0], total, keep=keep)
            if total > 0
            else [w for w in ws if w >= 0]
        )
        it = iter(shown)
        return [w if w < 0 else next(it) for w in ws]

    def header(self, width: int | None = None) -> Text:
        """The column titles, aligned with the rows as drawn at `width` cells."""
        t = Text(style="bold")
        for (_, title, _), w in zip(self.columns, self.widths(width), strict=True):
            if w < 0:
                continue
            if w and cell_len(title) > w:  # a cut title says so
                title = set_cell_size(title, max(w - 1, 0)) + "…"
            t.append(set_cell_size(title, w) + " " if w else title)
        return t

    def on_resize(self) -> None:
        self._cache.clear()
        if self.header_widget is not None:
            self.header_widget.update(self.header())

    # -- rendering --------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        pos = y + scroll_y
        width = self.size.width
        if pos >= self._len():
            return Strip.blank(width, self.rich_style)
        selected = pos == self.cursor
        key = (pos, selected, width)
        strip = self._cache.get(key)
        if strip is None and self.source is not None and not self._page_ready(pos):
            # The page is being fetched off the UI thread: a placeholder, not cached.
            return Strip(
                [Segment(set_cell_size(" …", max(width, 1)), self.rich_style)], max(width, 1)
            )
        if strip is None:
            strip = self._render_row(pos, selected, width + scroll_x)
            self._cache[key] = strip
            if len(self._cache) > 2000:
                self._cache.popitem(last=False)
        return strip.crop(scroll_x, scroll_x + width)

    def _render_row(self, pos: int, selected: bool, width: int) -> Strip:
        row = self.row(pos) or {}
        parts = []
        used = 0
        for (key, _, _), w in zip(self.columns, self.widths(), strict=True):
            if w < 0:
                continue
            v = row.get(key)
            if isinstance(v, float):
                s = fmt(v, metric=key)
            else:
                s = clean(v).replace("\n", " ⏎ ").replace("\t", " ")
            if w:
                if (
                    cell_len(s) > w
                ):  # cut: say so, and where gold and prediction differ, show that part
                    other = row.get(DIFF_PAIRS[key]) if key in DIFF_PAIRS else None
                    s = cut_where_differs(s, clean(other), w) if isinstance(other, str) else s
                    if cell_len(s) > w:
                        s = set_cell_size(s, w - 1) + "…"
                parts.append(set_cell_size(s, w) + " ")
                used += w + 1
            else:
                parts.append(set_cell_size(s, max(0, width - used)))
        line = "".join(parts)
        style = self.rich_style
        if selected:
            style = style + Style(reverse=True, bold=self.has_focus)
        elif row.get("error"):
            style = style + Style(color="red")
        return Strip([Segment(set_cell_size(line, max(width, 1)), style)], max(width, 1))

    def watch_cursor(self, old: int, new: int) -> None:
        for p in (old, new):
            self._cache.pop((p, True, self.size.width), None)
            self._cache.pop((p, False, self.size.width), None)
        self.scroll_to_region_cursor()
        self.refresh()

    def scroll_to_region_cursor(self) -> None:
        from textual.geometry import Region

        if self._len():
            self.scroll_to_region(Region(0, self.cursor, 1, 1), animate=False, force=True)

    def on_focus(self) -> None:
        self._cache.clear()
        self.refresh()

    def on_blur(self) -> None:
        self._cache.clear()
        self.refresh()

    # -- actions ----------------------------------------------------------------------------
    def action_cursor(self, delta: int) -> None:
        if self._len():
            self.cursor = max(0, min(self._len() - 1, self.cursor + delta))

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * max(1, self.size.height - 1))

    def action_jump(self, where: int) -> None:
        if self._len():
            self.cursor = 0 if where == 0 else self._len() - 1

    def action_open(self) -> None:
        row = self.current_row()
        if row is not None:
            self.post_message(self.Opened(self, row))

    def on_click(self, event: events.Click) -> None:
        pos = event.y + int(self.scroll_offset.y)
        if 0 <= pos < self._len():
            again = pos == self.cursor
            self.cursor = pos
            if again or event.chain >= 2:
                self.action_open()


# -- plots -----------------------------------------------------------------------------------
class Plot(PlotextPlot):
    """A plotext plot drawn whole each time: ``with self.drawing(title) as plt`` clears the
    figure and titles it, and refreshes once drawn, all in one batch (no half-drawn frame)."""

    @contextmanager
    def drawing(self, title: str) -> Iterator[Any]:
        plt = self.plt
        with self.app.batch_update():
            plt.clear_figure()
            plt.title(title)
            yield plt
            self.refresh()

    def unit_axes(self, diagonal: bool = False) -> None:
        """Both axes from 0 to 1, with the y = x diagonal where asked (reliability diagrams)."""
        self.plt.xlim(0, 1)
        self.plt.ylim(0, 1)
        if diagonal:
            self.plt.plot([0, 1], [0, 1], marker="dot", color="gray")

    def bars(self, labels: list[str], series: Mapping[str, list[Any]]) -> None:
        """Grouped bars: at each label one bar a series, the series' names in the legend."""
        # The bundled stub names this `label`; plotext's multiple_bar takes `labels`.
        self.plt.multiple_bar(labels, list(series.values()), labels=list(series))  # type: ignore[call-arg]

    def frame_bars(self, frame: Any, *columns: str) -> None:
        """Grouped bars of these columns of a frame at its ``label`` column (none for no rows)."""
        if frame is not None and len(frame):
            self.bars(frame["label"].tolist(), {c: frame[c].tolist() for c in columns})


class ReliabilityPlot(Plot):
    """Reliability diagram: accuracy per confidence bin against the diagonal."""

    def show(self, bins: Any) -> None:
        with self.drawing("reliability") as plt:
            self.unit_axes(diagonal=True)
            if bins is not None and len(bins):
                b = bins[bins["count"] > 0]
                if len(b):
                    plt.plot(
                        b["confidence"].tolist(),
                        b["accuracy"].tolist(),
                        marker="braille",
                        color="cyan",
                    )
                    plt.scatter(
                        b["confidence"].tolist(), b["accuracy"].tolist(), marker="●", color="cyan"
                    )
            plt.xlabel("confidence")
            plt.ylabel("accuracy")


class HistPlot(Plot):
    """Grouped histogram of model P(yes) bins (e.g. by human majority)."""

    def show(self, hist: dict[str, list[int]] | None, title: str) -> None:
        with self.drawing(title):
            if hist:
                self.bars([f"{i / 10:.1f}" for i in range(10)], hist)
