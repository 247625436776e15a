"""Reading a run's result rows: as stored, decoded, as `Result`s, and one item's variants."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llmscope.engine.types import ItemDetail, Result
from llmscope.store.codec import (
    JSON_RESULT_COLUMNS,
    decode_frame,
    decode_json,
    decode_top_tokens,
    encode_json,
    is_null,
)
from llmscope.store.errors import StoreError

if TYPE_CHECKING:
    import pandas as pd

    from llmscope.store.db import Rows

# Every results column, `prompt` as the model saw it: a row stores NULL when its prompt is its
# item's text (imports: 87k trial texts are not stored again per run), so readers take the text
# of the run's suite's item. Every reader of result rows selects `RESULT_COLUMNS` (plus any item
# columns `i.*`) `FROM_RESULTS_WITH_ITEMS`.
RESULT_COLUMNS = "r.* REPLACE (coalesce(r.prompt, i.text) AS prompt)"
FROM_RESULTS_WITH_ITEMS = (
    "FROM results r LEFT JOIN runs u ON u.run_id = r.run_id "
    "LEFT JOIN items i ON i.suite_id = u.suite_id AND i.item_id = r.item_id"
)


class ResultQueries:
    """The `Store`'s reads of result rows."""

    if TYPE_CHECKING:  # provided by `Store` (store/db.py)
        path: str

        def execute(self, sql: str, params: Sequence[Any] | None = None) -> Rows: ...
        def query_df(self, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame: ...

    def done_keys(self, run_id: str) -> set[tuple[str, str]]:
        rows = self.execute(
            "SELECT item_id, variant FROM results WHERE run_id = ?", [run_id]
        ).fetchall()
        return {(r[0], r[1]) for r in rows}

    def count_results(self, run_id: str) -> tuple[int, int]:
        row = self.execute(
            "SELECT count(*), count(error) FROM results WHERE run_id = ?", [run_id]
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def max_seq(self, run_id: str) -> int:
        row = self.execute(
            "SELECT coalesce(max(seq), -1) FROM results WHERE run_id = ?", [run_id]
        ).fetchone()
        return int(row[0]) if row else -1

    def results_frame(self, run_id: str, *, with_items: bool = True) -> pd.DataFrame:
        """Per-item results of a run (JSON columns left as text), joined with item fields."""
        return self._fill_top_tokens(self._results_rows(run_id, with_items), as_text=True)

    def _results_rows(self, run_id: str, with_items: bool) -> pd.DataFrame:
        items = ", i.text, i.fields, i.idx, i.options" if with_items else ""
        return self.query_df(
            f"SELECT {RESULT_COLUMNS}{items} {FROM_RESULTS_WITH_ITEMS} "
            "WHERE r.run_id = ? ORDER BY r.seq",
            [run_id],
        )

    def _fill_top_tokens(self, df: pd.DataFrame, *, as_text: bool) -> pd.DataFrame:
        """Rows' `top_tokens` from their batch's blob where the row holds none (rows written
        since schema 5), as JSON text (`as_text`) or decoded; drops `top_tokens_blob`. Each
        blob the rows name is read and decompressed once."""
        if "top_tokens_blob" not in df.columns:
            return df
        ids = df.pop("top_tokens_blob")
        need = ids.notna() & df["top_tokens"].isna()
        if not need.any():
            return df
        wanted = sorted({int(b) for b in ids[need]})
        rows = self.execute(
            f"SELECT blob_id, seq_lo, top_tokens FROM result_blobs WHERE blob_id IN ({', '.join('?' * len(wanted))})",
            wanted,
        ).fetchall()
        blobs = {int(b): (int(lo), decode_top_tokens(data)) for b, lo, data in rows}
        tops: list[Any] = df["top_tokens"].tolist()
        seqs = df["seq"].tolist()
        for pos, (bid, wanted_here) in enumerate(zip(ids.tolist(), need.tolist(), strict=True)):
            if not wanted_here:
                continue
            entry = blobs.get(int(bid))
            if entry is None:
                raise StoreError(
                    f"{self.path}: a result names top-tokens blob {int(bid)}, which is missing"
                )
            i = int(seqs[pos]) - entry[0]
            if not 0 <= i < len(entry[1]):
                raise StoreError(
                    f"{self.path}: result seq {int(seqs[pos])} is outside its top-tokens blob"
                )
            v = entry[1][i]
            tops[pos] = v if not as_text or v is None else encode_json(v)
        import pandas as pd

        df["top_tokens"] = pd.Series(tops, index=df.index, dtype=object)
        return df

    def results_decoded(self, run_id: str, *, with_items: bool = True) -> pd.DataFrame:
        """`results_frame` with its JSON columns decoded (dicts/lists, None for NULL): the form
        every reader outside store/ uses, so none of them parses stored JSON."""
        df = self._fill_top_tokens(self._results_rows(run_id, with_items), as_text=False)
        return decode_frame(df)

    def results(self, run_id: str) -> list[Result]:
        """A run's rows as the `Result`s that were written (JSON decoded, NULL floats as None)."""
        df = self.results_decoded(run_id, with_items=False)
        names = [f for f in Result.__dataclass_fields__ if f in df.columns]
        out = []
        for rec in df[names].to_dict("records"):
            vals: dict[str, Any] = {str(k): (None if is_null(v) else v) for k, v in rec.items()}
            vals["n_tokens"] = int(vals.get("n_tokens") or 0)
            vals["latency_ms"] = float(vals.get("latency_ms") or 0.0)
            vals["extra"] = vals.get("extra") or {}
            out.append(Result(**vals))
        return out

    def item_detail(self, run_id: str, item_id: str) -> ItemDetail:
        """Every stored variant of one item in one run, with the item's text, fields and options."""
        return self.item_details(run_id, [item_id])[str(item_id)]

    def item_details(self, run_id: str, item_ids: Sequence[str]) -> dict[str, ItemDetail]:
        """`item_detail` of several items of one run, read in one query (a page of failing
        items reads its details at once, not one query each); every id asked for is a key."""
        wanted = list(dict.fromkeys(str(i) for i in item_ids))
        if not wanted:
            return {}
        df = self.query_df(
            f"SELECT {RESULT_COLUMNS}, i.text AS item_text, i.fields AS item_fields, i.options AS item_options "
            f"{FROM_RESULTS_WITH_ITEMS} WHERE r.run_id = ? AND r.item_id IN ({', '.join('?' * len(wanted))}) "
            "ORDER BY r.item_id, r.variant",
            [run_id, *wanted],
        )
        df = self._fill_top_tokens(df, as_text=False)
        by_item: dict[str, list[dict[str, Any]]] = {i: [] for i in wanted}
        for rec in df.to_dict("records"):
            row = {str(k): (None if is_null(v) else v) for k, v in rec.items()}
            for k in (*JSON_RESULT_COLUMNS, "item_fields", "item_options"):
                row[k] = decode_json(row.get(k))
            by_item[str(row["item_id"])].append(row)
        out = {}
        for iid, rows in by_item.items():
            first = rows[0] if rows else {}
            out[iid] = ItemDetail(
                item_id=iid,
                text=first.get("item_text") or "",
                fields=first.get("item_fields") or {},
                options=first.get("item_options"),
                variants=rows,
            )
        return out
