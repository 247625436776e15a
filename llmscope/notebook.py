"""The notebook API: `db = llmscope.open("x.duckdb")`, then `db.runs()`, `db.results(run)`,
`db.metrics(run)`, `db.study(name)` and `db.irt(suite=...)`.

Read-only and safe beside a writing process, as `llmscope report` is: every call opens the file
read-only for its reads and closes it after, so nothing is held between calls and a run started
in another terminal can take the file. While another process writes the file (DuckDB then
keeps read-only openers out), a call reads a private copy of it taken between two of the
writer's commits (store/snapshot.py): every row stored by the writer's last flush, nothing
half-written. Each such read is said in `Database.notices` and as a warning, with the rows the
running runs hold. Nothing is ever written beside the file but the metrics cache.

Columns and numbers come from the one place each is made: `results` is the export's rows
(`llmscope.io.export`, the columns and types of `llmscope export --format parquet`), `metrics` the
pipeline's `RunMetrics` (`llmscope report --json` prints its `rows()`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import pandas as pd

    from llmscope.analysis.metric_values import RunMetrics
    from llmscope.store.db import Store

FORMATS = ("pandas", "arrow", "polars")


class NotebookError(ValueError):
    """A request the database cannot answer (no such file or run, an unknown format)."""


class Database:
    """Read access to one llmscope database (see the module's docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise NotebookError(f"no database at {self.path}")
        self.notices: list[str] = []

    def __repr__(self) -> str:
        return f"llmscope.Database({str(self.path)!r})"

    # -- reading -----------------------------------------------------------------------------------
    @contextmanager
    def _store(self) -> Iterator[Store]:
        from llmscope.store.db import Store

        store = Store(self.path, read_only=True, snapshot=True)
        try:
            note = store.writing_note()
            if note is not None:
                self.notices.append(note)
                warnings.warn(note, stacklevel=4)  # the caller of runs()/results()/metrics()
            yield store
        finally:
            store.close()

    def _find(self, store: Store, run: str | dict[str, Any]) -> dict[str, Any]:
        rid = run["run_id"] if isinstance(run, dict) else str(run)
        found = store.find_run(rid)
        if found is None:
            raise NotebookError(f"no run {rid!r} in {self.path}")
        return found

    def runs(self) -> pd.DataFrame:
        """Every run, one row each (the columns `llmscope runs --json` prints)."""
        with self._store() as store:
            return store.runs()

    def run(self, run: str) -> dict[str, Any]:
        """One run's stored record (id, prefix or 'last')."""
        with self._store() as store:
            return self._find(store, run)

    def results(self, run: str | dict[str, Any], as_: str = "pandas") -> Any:
        """A run's rows with the export's typed columns (`llmscope.io.export.COLUMNS`): a pandas
        DataFrame, or a pyarrow Table (`as_="arrow"`) or polars DataFrame (`as_="polars"`)."""
        from llmscope.io.export import export_rows, to_arrow

        if as_ not in FORMATS:
            raise NotebookError(f"as_ must be one of {', '.join(FORMATS)}, got {as_!r}")
        with self._store() as store:
            return _as(to_arrow(export_rows(store, self._find(store, run))), as_)

    def metrics(self, run: str | dict[str, Any], by: list[str] | None = None) -> RunMetrics:
        """The run's metrics from the pipeline (`RunMetrics`; `.rows()` are `report --json`'s rows)."""
        from llmscope.report import run_metrics

        with self._store() as store:
            return run_metrics(store, self._find(store, run), by)

    def studies(self) -> list[str]:
        """The names of the studies recorded in the file (`llmscope study run`)."""
        from llmscope.studies.store import study_names

        with self._store() as store:
            return study_names(store)

    def study(self, name: str, as_: str = "pandas") -> Any:
        """A study's cells as `llmscope study status --json` gives them: one row a cell, with its
        state, counts, headline metric and interval (`ci95_lo`, `ci95_hi`) and one column per
        factor (`level.<factor>`)."""
        import pyarrow as pa

        from llmscope.studies.store import study_cells, study_names, study_record

        if as_ not in FORMATS:
            raise NotebookError(f"as_ must be one of {', '.join(FORMATS)}, got {as_!r}")
        with self._store() as store:
            if study_record(store, name) is None:
                known = study_names(store)
                raise NotebookError(
                    f"no study {name!r} in {self.path}; recorded studies: {', '.join(known) or '(none)'}"
                )
            cells = study_cells(store, name)
        rows = []
        for c in cells:
            d = c.to_dict()
            levels = d.pop("levels", None) or {}
            lo, hi = d.pop("ci95", None) or (None, None)
            rows.append(
                {**d, "ci95_lo": lo, "ci95_hi": hi, **{f"level.{k}": v for k, v in levels.items()}}
            )
        return _as(pa.Table.from_pylist(rows), as_)

    def irt(
        self,
        suite: str | None = None,
        runs: list[str] | None = None,
        model: str = "2pl",
    ) -> IrtTables:
        """Item response theory across runs of one suite (`llmscope irt`): every run of `suite`
        (its name) or the `runs` named (ids or prefixes). `model` is "2pl" (default), "rasch"
        or "both". Returns `IrtTables(items, abilities)`, two pandas DataFrames: per item its
        difficulty and discrimination with 95% interval bounds, the likely-label-error flag and
        the plain-words reading; per run its ability (theta) with its interval. Each frame's
        `attrs["method"]` names the fit and `attrs["warnings"]` what a reader must know (also
        raised as Python warnings); every number is `llmscope.analysis.irt`'s."""
        from llmscope.analysis.irt import (
            MODELS,
            IrtError,
            abilities_frame,
            fit_stored,
            items_frame,
            runs_of_suite,
        )

        if (suite is None) == (runs is None):
            raise NotebookError("irt: give suite=NAME or runs=[...] (one of them)")
        if model not in (*MODELS, "both"):
            raise NotebookError(
                f"irt: model must be one of {', '.join(MODELS)}, both; got {model!r}"
            )
        with self._store() as store:
            if suite is not None:
                found = runs_of_suite(store, suite_name=suite)
                if not found:
                    raise NotebookError(f"irt: no run of suite {suite!r} in {self.path}")
            else:
                found = [self._find(store, r) for r in runs or []]
            try:
                fits = [
                    fit_stored(store, found, m) for m in (MODELS if model == "both" else (model,))
                ]
            except IrtError as e:
                raise NotebookError(f"irt: {e}") from e
        items, abilities = items_frame(fits), abilities_frame(fits)
        for df in (items, abilities):
            df.attrs["method"] = {f.model: f.method for f in fits}
            df.attrs["warnings"] = {f.model: list(f.warnings) for f in fits}
            df.attrs["notes"] = {f.model: list(f.notes) for f in fits}
        if any(f.warnings for f in fits):
            import warnings

            for f in fits:
                for w in f.warnings:
                    warnings.warn(f"irt {f.model}: {w}", stacklevel=2)
        return IrtTables(items, abilities)


class IrtTables(NamedTuple):
    """`Database.irt`'s answer: `items, abilities = db.irt(suite="...")`."""

    items: pd.DataFrame
    abilities: pd.DataFrame


def _as(table: Any, as_: str) -> Any:
    """An Arrow table as the frame asked for: pandas, the table itself, or polars."""
    if as_ == "arrow":
        return table
    if as_ == "polars":
        try:
            import polars as pl
        except ImportError as e:
            raise NotebookError("as_='polars' needs polars (pip install polars)") from e
        return pl.from_arrow(table)
    return table.to_pandas()


def open_db(path: str | os.PathLike[str]) -> Database:
    """Open an llmscope database for reading (`llmscope.open`)."""
    return Database(path)
