"""Suites whose items come from a Hugging Face dataset: a local parquet/JSON/CSV/Arrow file
(always, offline) or a hub id (through the `datasets` library, when installed and online).

A suite spec names the data with a `dataset:` block instead of `items:`::

    name: arc-easy-local
    task: choice
    text_field: question
    templates: {qa: "Question: {question}\\nAnswer:"}
    dataset:
      path: arc_easy_test.parquet   # file relative to the spec, a data folder, or a hub id (org/name)
      name: ARC-Easy                # hub configuration (hub ids only)
      split: test                   # hub split (default test)
      revision: main                # hub revision (hub ids only)
      fields:                       # item field <- dataset column ("a.b" reads nested values)
        id: id
        question: question
        options: choices.text
        gold: answerKey
      gold_index: false             # true: the gold column holds a 0-based index into the options

Columns not named in `fields` are kept under their own names (so `group_by` can use them).
Without an `id` column the row number (0-based, as `datasets` counts) is the item id.

Local files are read with pyarrow (already a dependency) rather than `datasets`, so a suite
on a local file needs no extra package and no cache directory; the hub path needs `datasets`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmscope.data.registry import SpecReader, register_spec_reader
from llmscope.data.suites import Suite, SuiteError, _make_item, jsonl_records, suite_from_spec
from llmscope.engine.types import Item

LOCAL_FORMATS = {
    ".parquet": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
    ".arrow": "arrow",
    ".feather": "arrow",
}
DATASET_KEYS = ("path", "name", "split", "revision", "fields", "gold_index", "format")


@dataclass
class DatasetSource:
    """Where a suite's rows come from and how columns map to item fields."""

    path: str
    name: str | None = None
    split: str = "test"
    revision: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    gold_index: bool = False
    format: str | None = None  # a LOCAL_FORMATS value; None: from the file suffix
    local: Path | None = None  # resolved local file, None for a hub id
    spec_path: Path | None = None  # the spec naming it, for error messages


@dataclass
class Row:
    """One dataset row with its place in the source for error messages."""

    values: dict[str, Any]
    line: int  # JSONL/CSV line, or 1-based row number for parquet/arrow/JSON arrays
    index: int  # 0-based row number


def parse_source(raw: Any, spec_path: Path | None) -> DatasetSource:
    """Validate a spec's `dataset:` block (SuiteError names the key)."""
    where = spec_path

    def err(msg: str, key: str) -> SuiteError:
        return SuiteError(msg, where, None, f"dataset.{key}" if key else "dataset")

    if isinstance(raw, str):
        raw = {"path": raw}
    if not isinstance(raw, dict):
        raise err("must be a mapping with at least `path` (a local file or a hub id)", "")
    unknown = sorted(set(raw) - set(DATASET_KEYS))
    if unknown:
        raise err(
            f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(DATASET_KEYS)}", unknown[0]
        )
    path = raw.get("path")
    if not isinstance(path, str) or not path.strip():
        raise err("required: a local parquet/JSON/CSV file or a Hugging Face hub id", "path")
    for key in ("name", "split", "revision", "format"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise err(f"must be a string, got {type(raw[key]).__name__}", key)
    fields = raw.get("fields") or {}
    if not isinstance(fields, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in fields.items()
    ):
        raise err("must map item field names to dataset column names (strings)", "fields")
    gold_index = raw.get("gold_index", False)
    if not isinstance(gold_index, bool):
        raise err("must be true or false", "gold_index")
    fmt = raw.get("format")
    if fmt is not None and fmt not in set(LOCAL_FORMATS.values()):
        raise err(
            f"unknown format {fmt!r}; expected one of {', '.join(sorted(set(LOCAL_FORMATS.values())))}",
            "format",
        )
    src = DatasetSource(
        path=path,
        name=raw.get("name"),
        split=raw.get("split") or "test",
        revision=raw.get("revision"),
        fields=dict(fields),
        gold_index=gold_index,
        format=fmt,
        spec_path=spec_path,
    )
    base = spec_path.parent if spec_path else Path.cwd()
    cand = (base / path).expanduser()
    if cand.is_file():
        src.local = cand.resolve()
    elif cand.is_dir():  # a folder of data files: `datasets.load_dataset(folder)` picks the splits
        src.path = str(cand.resolve())
    elif Path(path).suffix.lower() in LOCAL_FORMATS or path.startswith((".", "/", "~")):
        raise err(f"data file not found: {cand.resolve()}", "path")
    return src


def _local_format(src: DatasetSource) -> str:
    assert src.local is not None
    fmt = src.format or LOCAL_FORMATS.get(src.local.suffix.lower())
    if fmt is None:
        raise SuiteError(
            f"cannot tell the format from the suffix {src.local.suffix!r}; set dataset.format "
            f"to one of {', '.join(sorted(set(LOCAL_FORMATS.values())))}",
            src.local,
        )
    return fmt


def read_local_rows(src: DatasetSource) -> list[Row]:
    """Rows of a local parquet, JSON Lines, JSON (array or {split: array}), CSV/TSV or Arrow file."""
    path = src.local
    assert path is not None
    fmt = _local_format(src)
    if fmt == "jsonl":
        try:
            text = path.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as e:
            raise SuiteError("not valid UTF-8", path) from e
        return [Row(rec, n, i) for i, (n, rec) in enumerate(jsonl_records(text, path))]
    if fmt == "json":
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SuiteError(f"invalid JSON: {e}", path) from e
        if isinstance(data, dict):
            # {"data": [...]} or {"test": [...], "train": [...]} as some dataset dumps are written
            arrays = {k: v for k, v in data.items() if isinstance(v, list)}
            if src.split in arrays:
                data = arrays[src.split]
            elif len(arrays) == 1:
                data = next(iter(arrays.values()))
            else:
                raise SuiteError(
                    f"a JSON object needs one array of rows or a key named after the split "
                    f"{src.split!r}; found {', '.join(arrays) or 'no arrays'}",
                    path,
                )
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise SuiteError(
                "a .json data file must hold an array of objects (use .jsonl for JSON Lines)", path
            )
        return [Row(r, i + 1, i) for i, r in enumerate(data)]
    import pyarrow as pa

    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(path)
        elif fmt in ("csv", "tsv"):
            import pyarrow.csv as pcsv

            delim = pcsv.ParseOptions(delimiter="\t" if fmt == "tsv" else ",")
            with pcsv.open_csv(path, parse_options=delim) as reader:
                names = reader.schema.names
            # every column read as text: ids such as "007" stay as written, nothing is guessed
            table = pcsv.read_csv(
                path,
                parse_options=delim,
                convert_options=pcsv.ConvertOptions(
                    column_types={n: pa.string() for n in names}, strings_can_be_null=False
                ),
            )
        else:
            import pyarrow.feather as pf

            table = pf.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise SuiteError(f"cannot read {fmt} data: {str(e).splitlines()[0]}", path) from e
    first_line = 2 if fmt in ("csv", "tsv") else 1  # CSV rows start below the header
    return [Row(r, i + first_line, i) for i, r in enumerate(table.to_pylist())]


def read_hub_rows(src: DatasetSource) -> list[Row]:
    """Rows of a hub dataset split through `datasets.load_dataset` (needs the package and network
    the first time; later runs use the local `datasets` cache)."""
    try:
        import datasets
    except ImportError as e:
        raise SuiteError(
            f"{src.path!r} is not a local file, and hub datasets need the `datasets` package "
            "(pip install 'datasets>=4')",
            src.spec_path,
            None,
            "dataset.path",
        ) from e
    from packaging.version import InvalidVersion, Version

    try:
        old = Version(datasets.__version__) < Version("4.0")
    except (InvalidVersion, AttributeError):
        old = True
    if old:
        # before 4.0 a repository's loading script ran (2.16-2.19 with only a warning)
        raise SuiteError(
            f"hub datasets need the `datasets` package 4.0 or later, which never runs a dataset "
            f"repository's code; found {getattr(datasets, '__version__', 'unknown')} "
            "(pip install -U 'datasets>=4')",
            src.spec_path,
            None,
            "dataset.path",
        )
    try:
        ds = datasets.load_dataset(src.path, src.name, split=src.split, revision=src.revision)
    except Exception as e:  # the library raises many types (network, missing config, bad split)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise SuiteError(
            f"cannot load hub dataset {src.path!r} (config {src.name!r}, split {src.split!r}): "
            f"{first}",
            src.spec_path,
            None,
            "dataset.path",
        ) from e
    return [Row(dict(r), i + 1, i) for i, r in enumerate(ds)]


def read_rows(src: DatasetSource) -> list[Row]:
    """The rows of a local file or of a hub dataset split."""
    return read_local_rows(src) if src.local is not None else read_hub_rows(src)


_MISSING = object()


def column(values: dict[str, Any], path: str) -> Any:
    """The value at a column path: "a" or "a.b" (nested structs) or "a.0" (list element)."""
    cur: Any = values
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif (
            isinstance(cur, list)
            and part.lstrip("-").isdigit()
            and -len(cur) <= int(part) < len(cur)
        ):
            cur = cur[int(part)]
        else:
            return _MISSING
    return cur


def map_row(row: Row, src: DatasetSource, suite: Suite, where: Path | str) -> dict[str, Any]:
    """Item record: mapped fields, the other top-level columns, and the row number as id when
    there is no id column."""
    rec = {k: v for k, v in row.values.items() if k not in src.fields.values()}
    for name, col in src.fields.items():
        v = column(row.values, col)
        if v is _MISSING:
            raise SuiteError(
                f"no column {col!r} (columns: {', '.join(map(str, row.values))})",
                where,
                row.line,
                f"dataset.fields.{name}",
            )
        rec[name] = v
    if suite.id_field not in rec:
        rec[suite.id_field] = row.index
    if src.gold_index and suite.gold_field and rec.get(suite.gold_field) is not None:
        opts = rec.get(suite.options_field or "options")
        g = rec[suite.gold_field]
        try:
            gi = int(g)
        except (TypeError, ValueError):
            raise SuiteError(
                f"gold_index is set but the gold value {g!r} is not an integer",
                where,
                row.line,
                suite.gold_field,
            ) from None
        if not isinstance(opts, list) or not 0 <= gi < len(opts):
            n = len(opts) if isinstance(opts, list) else 0
            raise SuiteError(
                f"gold index {gi} is outside the {n} options", where, row.line, suite.gold_field
            )
        rec[suite.gold_field] = opts[gi]
    return rec


def rows_loader(suite: Suite, src: DatasetSource) -> Callable[[], list[Item]]:
    """A Suite item loader reading and mapping the rows once."""

    def load() -> list[Item]:
        where: Path | str = (
            src.local or f"hf:{src.path}" + (f"/{src.name}" if src.name else "") + f"[{src.split}]"
        )
        return [
            _make_item(suite, map_row(r, src, suite, where), Path(str(where)), r.line)
            for r in read_rows(src)
        ]

    return load


def suite_from_dataset_spec(spec: dict[str, Any], spec_path: Path | None) -> Suite:
    """A Suite from a spec with a `dataset:` block (instead of `items:`)."""
    if spec.get("items"):
        raise SuiteError(
            "give either `items` (a JSONL/CSV file) or `dataset`, not both",
            spec_path,
            None,
            "dataset",
        )
    src = parse_source(spec["dataset"], spec_path)
    base = {k: v for k, v in spec.items() if k != "dataset"}
    suite = suite_from_spec(base, spec_path)
    suite.spec = spec  # the dataset block is part of the suite's identity
    suite.items_path = src.local  # content_hash() covers the data file; None for hub ids
    suite._loader = rows_loader(suite, src)
    if not suite.source:
        suite.source = (
            f"Hugging Face dataset {src.path}" + (f" ({src.name})" if src.name else "")
            if src.local is None
            else str(src.local)
        )
    return suite


# items from a Hugging Face dataset file or hub id
register_spec_reader(SpecReader("dataset", lambda spec: "dataset" in spec, suite_from_dataset_spec))
