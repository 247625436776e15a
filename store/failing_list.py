"""A run's failing items (or a filter's rows), filtered, sorted and paged in SQL: the TUI's list."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import duckdb

from llmscope.store.errors import explain

if TYPE_CHECKING:
    from llmscope.store.db import Rows
    from llmscope.store.snapshot import WriterLock

# The failing rows of a run (the TUI's default list): an error, or scored below 0.5.
FAILING_WHERE = "(r.error IS NOT NULL OR (isfinite(r.correct) AND r.correct < 0.5))"


class FailingList:
    """The `Store`'s paged failing list."""

    if TYPE_CHECKING:  # provided by `Store` (store/db.py)
        path: str
        con: duckdb.DuckDBPyConnection
        _lock: WriterLock

        def execute(self, sql: str, params: Sequence[Any] | None = None) -> Rows: ...

    FAILING_SORTS = ("arrival", "confidence", "distance", "group", "item")

    @staticmethod
    def _failing_item_cols(
        group_field: str | None, alias: str = "i", distance: str | None = None, results: str = "r"
    ) -> tuple[str, str, list[Any]]:
        """SQL for the list's item-derived columns: group = the item field `group_field` as
        text ('None' when absent); distance = the caller's SQL template `distance` with
        {p_yes}, {p_no} and {human} (the item's human_q1) filled, NULL without one (the
        definition is analysis's: llmscope.analysis.yesno.HUMAN_DISTANCE_SQL)."""
        if group_field:
            grp = f"coalesce(json_extract_string({alias}.fields, ?), 'None')"
            params: list[Any] = ["$." + json.dumps(group_field)]
        else:
            grp, params = "''", []
        human = f"TRY_CAST(json_extract_string({alias}.fields, '$.human_q1') AS DOUBLE)"
        dist = (
            "CAST(NULL AS DOUBLE)"
            if distance is None
            else distance.format(p_yes=f"{results}.p_yes", p_no=f"{results}.p_no", human=human)
        )
        return grp, dist, params

    def _failing_sql(
        self,
        run_id: str,
        group_field: str | None,
        group: str | None,
        min_conf: float | None,
        sort: str = "arrival",
        where: str | None = FAILING_WHERE,
        distance: str | None = None,
    ) -> tuple[str, list[Any]]:
        """The rows of a run that `where` chooses (default: the failing ones, an error or scored
        below 0.5; None: all): result columns, plus the item-derived `group`/`distance` only when
        the sort or a filter needs them (they read the items' JSON fields, the expensive part on
        a big suite)."""
        need_items = group is not None or sort in ("group", "distance")
        cols = "r.item_id, r.variant, r.gold, r.prediction, r.confidence, r.error, r.seq, r.p_yes, r.p_no"
        params: list[Any] = []
        join = ""
        if need_items:
            grp, dist, params = self._failing_item_cols(group_field, distance=distance)
            cols += f', {grp} AS "group", {dist} AS distance'
            join = (
                "JOIN runs u ON u.run_id = r.run_id "
                "LEFT JOIN items i ON i.suite_id = u.suite_id AND i.item_id = r.item_id"
            )
        conds = ["r.run_id = ?", *([where] if where else [])]
        params.append(run_id)
        sql = f"SELECT {cols} FROM results r {join} WHERE {' AND '.join(conds)}"
        outer: list[str] = []
        oparams: list[Any] = []
        if group is not None:
            outer.append('"group" = ?')
            oparams.append(group)
        if min_conf is not None:
            outer.append("coalesce(confidence, -1) >= ?")
            oparams.append(float(min_conf))
        owhere = (" WHERE " + " AND ".join(outer)) if outer else ""
        return f"SELECT * FROM ({sql}) f{owhere}", params + oparams

    @staticmethod
    def _failing_order(sort: str, p: str = "") -> str:
        # Ties keep arrival order, as the in-memory list's stable sorts do; no value sorts last.
        return {
            "arrival": f"{p}seq",
            "confidence": f"coalesce({p}confidence, -1) DESC, {p}seq",
            "distance": f"coalesce({p}distance, -1) DESC, {p}seq",
            "group": f'{p}"group", {p}seq',
            # whole-number ids by value (10, 141, 1003), then the rest as text (tui.widgets.item_sort_key)
            "item": f"TRY_CAST({p}item_id AS BIGINT) NULLS LAST, {p}item_id, {p}seq",
        }[sort]

    def failing_count(
        self,
        run_id: str,
        *,
        group_field: str | None = None,
        group: str | None = None,
        min_conf: float | None = None,
        where: str | None = FAILING_WHERE,
        distance: str | None = None,
    ) -> int:
        """How many failing rows (or the rows `where` chooses) match the filters."""
        sql, params = self._failing_sql(
            run_id, group_field, group, min_conf, where=where, distance=distance
        )
        row = self.execute(f"SELECT count(*) FROM ({sql})", params).fetchone()
        return int(row[0]) if row else 0

    def failing_page(
        self,
        run_id: str,
        offset: int,
        limit: int,
        *,
        sort: str = "arrival",
        group_field: str | None = None,
        group: str | None = None,
        min_conf: float | None = None,
        where: str | None = FAILING_WHERE,
        distance: str | None = None,
    ) -> dict[str, list[Any]]:
        """Rows [offset, offset+limit) of the failing list in `sort` order, as column lists
        (item_id, variant, group, gold, prediction, confidence, distance, error, text, seq).
        `where` (an SQL condition on the results alias `r`; None: every row) chooses other rows.
        `distance`: the SQL template of the distance column (see `_failing_item_cols`).

        The page is chosen on the result columns first; item text and fields are joined for
        its rows only.
        """
        if sort not in self.FAILING_SORTS:
            raise ValueError(f"sort must be one of {', '.join(self.FAILING_SORTS)}, not {sort!r}")
        sql, params = self._failing_sql(run_id, group_field, group, min_conf, sort, where, distance)
        grp, dist, gparams = self._failing_item_cols(group_field, distance=distance, results="p")
        # Only the page's items are read (not joined against the suite's whole items table).
        page = f"""
            WITH p AS MATERIALIZED ({sql} ORDER BY {self._failing_order(sort)} LIMIT ? OFFSET ?),
            i AS (SELECT item_id, text, fields FROM items
                  WHERE suite_id = (SELECT suite_id FROM runs WHERE run_id = ?)
                    AND item_id IN (SELECT item_id FROM p))
            SELECT p.item_id, p.variant, {grp} AS "group", p.gold, p.prediction, p.confidence,
                   {dist} AS distance, p.error, coalesce(i.text, '') AS text, p.seq
            FROM p LEFT JOIN i ON i.item_id = p.item_id
            ORDER BY {self._failing_order(sort, "p.")}
        """
        with self._lock:
            try:
                cur = self.con.execute(page, [*params, int(limit), int(offset), run_id, *gparams])
                names = [d[0] for d in cur.description or []]
                rows = cur.fetchall()
            except duckdb.Error as e:
                raise explain(e, self.path, "querying") from e
        return {name: [r[j] for r in rows] for j, name in enumerate(names)}

    def failing_position(
        self,
        run_id: str,
        item_id: str,
        variant: str,
        *,
        sort: str = "arrival",
        group_field: str | None = None,
        group: str | None = None,
        min_conf: float | None = None,
        where: str | None = FAILING_WHERE,
        distance: str | None = None,
    ) -> int | None:
        """Where (item_id, variant) is in the sorted, filtered failing list (or `where`'s rows), or None."""
        sql, params = self._failing_sql(run_id, group_field, group, min_conf, sort, where, distance)
        row = self.execute(
            f"SELECT pos FROM (SELECT item_id, variant, row_number() OVER (ORDER BY "
            f"{self._failing_order(sort)}) - 1 AS pos FROM ({sql})) WHERE item_id = ? AND variant = ?",
            [*params, item_id, variant],
        ).fetchone()
        return int(row[0]) if row else None
