"""Row sources for the virtual item list: the failing items of a stored run, counted,
sorted, filtered and fetched by page in DuckDB, so the list never holds more than the
pages it has shown (a run with a million results scrolls like one with a hundred).

No Textual here: the widget (`tui.widgets.ItemList`) asks a source for pages.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from llmscope.store.db import Store

UseStore = Callable[[], AbstractContextManager[Store]]


class FailingSource:
    """The failing rows of one stored run, as `Store.failing_page` returns them.

    `use` yields the Store for one batch of reads (the app's `StoreHandle.use`, so a viewer
    that must not keep the file open closes it again after each page).
    """

    def __init__(self, use: UseStore, run_id: str, group_field: str | None = None) -> None:
        self.use = use
        self.run_id = run_id
        self.group_field = group_field
        self.sort = "arrival"
        self.group: str | None = None
        self.min_conf: float | None = None
        self.n_all = 0
        self._all: int | None = None
        self._counts: dict[tuple[str | None, float | None], int] = {}

    def _filters(self) -> dict[str, Any]:
        return {"group_field": self.group_field, "group": self.group, "min_conf": self.min_conf}

    def set_view(self, sort: str, group: str | None, min_conf: float | None) -> int:
        """Apply sort and filters; returns the number of rows they leave."""
        # A finished run does not change: counts are cached per filter, so a re-sort costs one
        # position query and one page instead of two counts more.
        self.sort, self.group, self.min_conf = sort, group, min_conf
        key = (group, min_conf)
        if key not in self._counts:
            with self.use() as store:
                if self._all is None:
                    self._all = store.failing_count(self.run_id, group_field=self.group_field)
                self._counts[key] = (self._all if group is None and min_conf is None
                                     else store.failing_count(self.run_id, **self._filters()))
        self.n_all = self._all or 0
        return self._counts[key]

    def page(self, offset: int, limit: int) -> dict[str, list[Any]]:
        with self.use() as store:
            page = store.failing_page(self.run_id, offset, limit, sort=self.sort, **self._filters())
        # as the in-memory list holds them: no value is NaN in the numeric columns
        for k in ("confidence", "distance"):
            page[k] = [math.nan if v is None else v for v in page.get(k, [])]
        return page

    def position(self, key: tuple[str, str]) -> int | None:
        with self.use() as store:
            return store.failing_position(self.run_id, key[0], key[1], sort=self.sort, **self._filters())
