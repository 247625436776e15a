"""Row sources for the virtual item list: the failing items of a stored run, counted,
sorted, filtered and fetched by page in DuckDB, so the list never holds more than the
pages it has shown (a run with a million results scrolls like one with a hundred).

No Textual here: the widget (`tui.widgets.ItemList`) asks a source for pages.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from llmscope.store.db import FAILING_WHERE, Store

UseStore = Callable[[], AbstractContextManager[Store]]


class FailingSource:
    """The rows of one stored run the item list shows: its failing rows as
    `Store.failing_page` returns them (scope "failing"), or all its rows, or the rows its
    task flags (scopes "all", "flagged"), with the task's declared columns added per page.

    `use` yields the Store for one batch of reads (the app's `StoreHandle.use`, so a viewer
    that must not keep the file open closes it again after each page).
    """

    SCOPES = ("failing", "all", "flagged")

    def __init__(
        self, use: UseStore, run_id: str, group_field: str | None = None, fields: Sequence[Any] = ()
    ) -> None:
        self.use = use
        self.run_id = run_id
        self.group_field = group_field
        self.fields = list(fields)  # the task's declared list columns (tui.data.fields.list_fields)
        self.scope = "failing"  # failing rows (Store.failing_*), all rows, or flagged rows
        self.sort = "arrival"
        self.group: str | None = None
        self.min_conf: float | None = None
        self.n_all = 0
        self._counts: dict[tuple[str, str | None, float | None], int] = {}

    def _filters(self) -> dict[str, Any]:
        from llmscope.analysis.yesno import HUMAN_DISTANCE_SQL

        # |m-h| as analysis defines it (llmscope.analysis.yesno.human_distance)
        return {
            "group_field": self.group_field,
            "group": self.group,
            "min_conf": self.min_conf,
            "distance": HUMAN_DISTANCE_SQL,
        }

    def set_view(self, sort: str, group: str | None, min_conf: float | None) -> int:
        """Apply sort and filters; returns the number of rows they leave."""
        # A finished run does not change: counts are cached per filter, so a re-sort costs one
        # position query and one page instead of two counts more.
        self.sort, self.group, self.min_conf = sort, group, min_conf
        key, total = (self.scope, group, min_conf), (self.scope, None, None)
        if key not in self._counts or total not in self._counts:
            with self.use() as store:
                for k in dict.fromkeys((total, key)):
                    if k not in self._counts:
                        self._counts[k] = self._count(store, *k)
        self.n_all = self._counts[total]
        return self._counts[key]

    def _where(self, scope: str) -> str | None:
        """The rows a scope lists, as an SQL condition on the results (None: all of them)."""
        if scope == "failing":
            return FAILING_WHERE
        if scope == "flagged":
            from llmscope.tui.data.fields import FLAG_KEY, field_sql

            return f"coalesce({field_sql(FLAG_KEY, 'bool')}, false)"
        return None

    def _count(self, store: Store, scope: str, group: str | None, min_conf: float | None) -> int:
        return store.failing_count(
            self.run_id,
            group_field=self.group_field,
            group=group,
            min_conf=min_conf,
            where=self._where(scope),
        )

    def page(self, offset: int, limit: int) -> dict[str, list[Any]]:
        with self.use() as store:
            page = store.failing_page(
                self.run_id,
                offset,
                limit,
                sort=self.sort,
                **self._filters(),
                where=self._where(self.scope),
            )
            self._add_fields(store, page)
        # as the in-memory list holds them: no value is NaN in the numeric columns
        for k in ("confidence", "distance"):
            page[k] = [math.nan if v is None else v for v in page.get(k, [])]
        return page

    def _add_fields(self, store: Store, page: dict[str, list[Any]]) -> None:
        """The task's declared columns for the page's rows (one query per page)."""
        from llmscope.tui.data.fields import field_sql, show_field

        if not self.fields or not page.get("item_id"):
            return
        exprs = ", ".join(f"{field_sql(f.key, f.kind)} AS c{j}" for j, f in enumerate(self.fields))
        keys = list(zip(page["item_id"], page["variant"], strict=True))
        marks = ", ".join("(?, ?)" for _ in keys)
        rows = store.execute(
            f"SELECT r.item_id, r.variant, {exprs} FROM results r WHERE r.run_id = ? "
            f"AND (r.item_id, r.variant) IN ({marks})",
            [self.run_id, *[x for k in keys for x in k]],
        ).fetchall()
        got = {(str(r[0]), str(r[1])): r[2:] for r in rows}
        for j, f in enumerate(self.fields):
            page[f.key] = [
                show_field((got.get((str(i), str(v))) or [None] * len(self.fields))[j], f.kind)
                for i, v in keys
            ]

    def position(self, key: tuple[str, str]) -> int | None:
        with self.use() as store:
            return store.failing_position(
                self.run_id,
                key[0],
                key[1],
                sort=self.sort,
                **self._filters(),
                where=self._where(self.scope),
            )
