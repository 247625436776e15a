"""`llmscope export`: a run's per-item rows as JSONL, CSV, Parquet, WorldSense or lm-eval files.

Rules (docs/DATA.md, "Export"):

- Types are kept: `prediction`, `gold`, `item_id`, `prompt` stay text ("5" stays "5"), numbers
  are numbers (float64 probabilities, int64 token counts), missing is null.
- Flat numeric columns beside the JSON detail: `p_yes`, `p_no`, `p_other` (the stored
  per-row values), `chosen_option` (the prediction of a task that picks among answers or
  options) and `chosen_prob` (its probability in `probs`).
- Every row names its run: `run_id`, `model`, `suite`, `suite_id`, `task`, `method`.
- An existing file is never replaced without `force`; a file is written whole (temp + rename)
  or not at all, and every path problem is one `ExportError` line.
- CSV text cells that a spreadsheet would run as a formula (first character `=`, `+`, `-`,
  `@`, tab or CR) get a leading `'` (OWASP's advice); `raw=True` writes them unchanged.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import math
import os
import re
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pyarrow as pa

from llmscope.engine.tasks import TASKS, Task
from llmscope.engine.textsafety import for_terminal, json_escape_bidi
from llmscope.store.db import Store, decode_json

FORMATS = ("jsonl", "csv", "parquet", "worldsense", "lm-eval")
JSON_COLS = ("probs", "top_tokens", "option_scores", "option_logprobs", "extra")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _task(name: str | None) -> type[Task] | None:
    """The registered task type of a stored run (None: a task this version does not know)."""
    return TASKS.get(name or "")


def _lm_eval_metric(task: str | None) -> str:
    # The name lm-evaluation-harness gives the per-item score (the task declares it).
    t = _task(task)
    return t.lm_eval_metric if t else "acc"


def _predicts_option(task: str | None) -> bool:
    # The prediction is one of a fixed set of answers/options, so chosen_option applies.
    t = _task(task)
    return bool(t and t.predicts_option)


class ExportError(Exception):
    """An export that cannot be written; the message is one line naming the path."""


@dataclass
class ExportRow:
    """One exported result row (types are the file's column types)."""

    run_id: str
    model: str | None
    suite: str | None
    suite_id: str | None
    task: str | None
    method: str | None
    item_id: str
    variant: str
    prediction: str | None
    gold: str | None
    correct: float | None
    confidence: float | None
    p_yes: float | None
    p_no: float | None
    p_other: float | None
    chosen_option: str | None
    chosen_prob: float | None
    n_tokens: int | None
    latency_ms: float | None
    error: str | None
    prompt: str | None
    probs: dict[str, Any] | None
    top_tokens: list[Any] | None
    option_scores: dict[str, Any] | None
    option_logprobs: dict[str, Any] | None
    extra: dict[str, Any] | None


ARROW_TYPES = {
    "correct": pa.float64(),
    "confidence": pa.float64(),
    "p_yes": pa.float64(),
    "p_no": pa.float64(),
    "p_other": pa.float64(),
    "chosen_prob": pa.float64(),
    "n_tokens": pa.int64(),
    "latency_ms": pa.float64(),
}
COLUMNS = [f.name for f in fields(ExportRow)]
SCHEMA = pa.schema([(c, ARROW_TYPES.get(c, pa.string())) for c in COLUMNS])
TEXT_COLUMNS = [c for c in COLUMNS if c not in ARROW_TYPES]
# CSV has no types: read the text columns as text, e.g. pandas.read_csv(f, dtype=CSV_DTYPES),
# or "5" comes back as the number 5.
CSV_DTYPES = {c: "str" for c in TEXT_COLUMNS}
# The same for DuckDB: read_csv(f, types=CSV_SQL_TYPES) (a column that is empty in every row
# would otherwise be guessed as VARCHAR).
CSV_SQL_TYPES = {
    f.name: {"double": "DOUBLE", "int64": "BIGINT"}.get(str(f.type), "VARCHAR") for f in SCHEMA
}


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _text(v: Any) -> str | None:
    if v is None or (isinstance(v, float) and v != v):
        return None
    return str(v)


def _json_obj(v: Any) -> Any:
    """A JSON column's value: decoded by the store (text from an older caller is decoded there too)."""
    if isinstance(v, (dict, list)):
        return v
    return decode_json(v) if isinstance(v, str) else None


def _method(task: str | None, extra: dict[str, Any] | None, run: dict[str, Any]) -> str | None:
    ex = extra or {}
    for key in ("method", "choice_method", "mode"):
        if isinstance(ex.get(key), str):
            return str(ex[key])
    backend = (
        ((run.get("meta") or {}).get("backend") or {}) if isinstance(run.get("meta"), dict) else {}
    )
    if isinstance(backend.get("method"), str):
        return str(backend["method"])
    # The method a task uses when a row does not record one itself (the task declares it).
    t = _task(task)
    return t.default_method if t else None


def _values(r: ExportRow) -> list[tuple[str, Any]]:
    """A row's (column, value) pairs in column order. Not `dataclasses.asdict`: that deep-copies
    every nested probs / top-tokens / extra value (8 of 13 s exporting an 87k-row run), and the
    writers only read them."""
    return [(c, getattr(r, c)) for c in COLUMNS]


def export_rows(store: Store, run: dict[str, Any]) -> list[ExportRow]:
    """The run's stored results as typed rows, in arrival order."""
    df = store.results_decoded(run["run_id"], with_items=False)
    task = run.get("task")
    out: list[ExportRow] = []
    # per-column lists (numpy scalars boxed as Python values, as `to_dict` gives) zipped into
    # one dict per row: 0.3 s less than `to_dict(orient="records")` per 87k rows
    names = [str(c) for c in df.columns]
    cols = [df[c].tolist() for c in df.columns]
    for vals in zip(*cols, strict=True):
        rec = dict(zip(names, vals, strict=True))
        probs = _json_obj(rec["probs"])
        scores = _json_obj(rec["option_scores"])
        extra = _json_obj(rec["extra"])
        pred = _text(rec["prediction"])
        # `_text`: a text column with some values holds NaN, not None, where a row has none
        # (pandas' string dtype), so `is None` alone would drop every row's choice in a run
        # with one error
        chosen = (
            pred
            if _predicts_option(task) and pred is not None and _text(rec["error"]) is None
            else None
        )
        chosen_prob = (
            _num(probs.get(chosen)) if isinstance(probs, dict) and chosen is not None else None
        )
        out.append(
            ExportRow(
                run_id=str(rec["run_id"]),
                model=_text(run.get("model")),
                suite=_text(run.get("suite_name")),
                suite_id=_text(run.get("suite_id")),
                task=_text(task),
                method=_method(task, extra, run),
                item_id=str(rec["item_id"]),
                variant=str(rec["variant"]),
                prediction=pred,
                gold=_text(rec["gold"]),
                correct=_num(rec["correct"]),
                confidence=_num(rec["confidence"]),
                p_yes=_num(rec["p_yes"]),
                p_no=_num(rec["p_no"]),
                p_other=_num(rec["other"]),
                chosen_option=chosen,
                chosen_prob=chosen_prob,
                n_tokens=None if _num(rec["n_tokens"]) is None else int(rec["n_tokens"]),
                latency_ms=_num(rec["latency_ms"]),
                error=_text(rec["error"]),
                prompt=_text(rec["prompt"]),
                probs=probs,
                top_tokens=_json_obj(rec["top_tokens"]),
                option_scores=scores,
                option_logprobs=(
                    {o: s.get("logprob") for o, s in scores.items() if isinstance(s, dict)}
                    if isinstance(scores, dict)
                    else None
                ),
                extra=extra,
            )
        )
    return out


def to_arrow(rows: list[ExportRow]) -> pa.Table:
    """Rows as an Arrow table with the export schema (JSON detail as JSON text)."""
    cols: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    for r in rows:
        for c, v in _values(r):
            cols[c].append(
                json.dumps(v, ensure_ascii=False) if c in JSON_COLS and v is not None else v
            )
    return pa.table(cols, schema=SCHEMA)


def csv_escape(cell: str) -> str:
    """A text cell a spreadsheet would evaluate as a formula, made literal with a leading quote."""
    return "'" + cell if cell.startswith(FORMULA_START) else cell


def to_csv(rows: list[ExportRow], *, raw: bool = False) -> str:
    """CSV text: numbers as numbers, JSON detail as JSON text, formula-like text cells escaped."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")  # RFC 4180: cells holding CR or LF get quoted
    w.writerow(COLUMNS)
    for r in rows:
        line = []
        for c, v in _values(r):
            if v is None:
                line.append("")
            elif c in JSON_COLS:
                line.append(json.dumps(v, ensure_ascii=False))
            elif c in TEXT_COLUMNS:
                line.append(v if raw else csv_escape(v))
            else:
                line.append(
                    repr(v) if isinstance(v, float) else str(v)
                )  # repr: shortest exact float
        w.writerow(line)
    return buf.getvalue()


def to_jsonl(rows: list[ExportRow]) -> str:
    """JSON lines; bidi controls written as JSON escapes (the same data, but a terminal or an
    editor showing the file cannot reorder it)."""
    return json_escape_bidi(
        "".join(json.dumps(dict(_values(r)), ensure_ascii=False) + "\n" for r in rows)
    )


# -- lm-eval shape ----------------------------------------------------------------------------
def _task_name(run: dict[str, Any], variant: str, n_variants: int) -> str:
    base = str(run.get("suite_name") or "llmscope")
    name = base if n_variants == 1 else f"{base}_{variant}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _sha(s: str) -> str:
    return hashlib.sha256(s.encode("utf-8")).hexdigest()


# lm-eval's multiple-choice metrics llmscope computes under the same names (engine/schemes.py)
LM_EVAL_METHODS = ("acc_norm", "acc_mutual_info")


def _lm_eval_doc(fields: dict[str, Any]) -> dict[str, Any]:
    """The doc lm-eval logs: an lm-eval task YAML's dataset row without the fields llmscope adds."""
    from llmscope.data.lm_eval_tasks import CHOICES, CONTEXT, GOLD, ID

    if CONTEXT in fields and CHOICES in fields:
        return {k: v for k, v in fields.items() if k not in (ID, CONTEXT, CHOICES, GOLD)}
    return fields


def _resp(lp: float | None, greedy: Any = None) -> list[str]:
    # lm-eval's (loglikelihood, is_greedy) pair as its tracker writes it: every value str()'d
    # (`sanitize_list`), so "True"/"False". is_greedy is recorded per option by the local
    # backend (`is_greedy`, `uncond_is_greedy`) and by an lm-eval import; where it was not
    # (an API server's log-likelihoods) it is str(None), not a guess.
    return [str(lp), str(None if greedy is None else bool(greedy))]


def lm_eval_samples(
    store: Store, run: dict[str, Any], rows: list[ExportRow]
) -> dict[str, list[dict[str, Any]]]:
    """Per-task sample records as lm-eval 0.4's `--log_samples` writes them.

    doc_id is the item's position in the suite and doc its fields (an lm-eval YAML's dataset
    row); `arguments` list one (context, continuation) request per option, the continuation
    as scored (target delimiter included: " garden"), then, when the run computed
    `acc_mutual_info`, one ("", continuation) request per option (lm-eval's unconditional
    requests); `resps`/`filtered_resps` hold [str(loglik), str(is_greedy)] with is_greedy
    "None" where it was not recorded; `target` is the gold option's index as text, as lm-eval's
    tracker writes it. Per-sample `acc` is the row's `correct`, `acc_norm`/`acc_mutual_info` the
    methods of those names. Generation rows list the text. Lines are in `doc_id` order, as
    lm-eval writes them.
    """
    items = store.items_frame(str(run.get("suite_id"))) if run.get("suite_id") else None
    doc_of: dict[str, tuple[int | None, dict[str, Any]]] = {}
    if items is not None and not items.empty:
        for it in items.to_dict(orient="records"):
            doc_of[str(it["item_id"])] = (
                int(it["idx"]),
                _lm_eval_doc(_json_obj(it.get("fields")) or {}),
            )
    variants = sorted({r.variant for r in rows})
    metric = _lm_eval_metric(run.get("task"))
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        idx, doc = doc_of.get(r.item_id, (None, {}))
        labels = list(r.probs) if isinstance(r.probs, dict) else None
        if r.option_logprobs:
            labels = list(r.option_logprobs)
        rec: dict[str, Any] = {"doc_id": idx, "doc": doc}
        metrics = [metric]
        values: dict[str, Any] = {metric: r.correct}
        if labels and _predicts_option(r.task):
            lps: list[float | None] = []
            for lab in labels:
                lp = (r.option_logprobs or {}).get(lab)
                if lp is None and isinstance(r.probs, dict):
                    p = _num(r.probs.get(lab))
                    lp = math.log(p) if p else None
                lps.append(_num(lp))
            conts = (r.extra or {}).get("continuations")
            if not (isinstance(conts, list) and len(conts) == len(labels)):
                conts = labels  # rows scored without continuations (label choice, yes/no)
            scores = r.option_scores or {}
            reqs: list[tuple[str, str, float | None, Any]] = [
                (r.prompt or "", str(c), lp, (scores.get(lab) or {}).get("is_greedy"))
                for c, lp, lab in zip(conts, lps, labels, strict=True)
            ]
            uncond = [_num((scores.get(lab) or {}).get("uncond_logprob")) for lab in labels]
            if any(u is not None for u in uncond):
                reqs += [
                    ("", str(c), u, (scores.get(lab) or {}).get("uncond_is_greedy"))
                    for c, u, lab in zip(conts, uncond, labels, strict=True)
                ]
            rec["target"] = str(labels.index(r.gold)) if r.gold in labels else str(r.gold)
            rec["arguments"] = {
                f"gen_args_{i}": {"arg_0": c, "arg_1": x} for i, (c, x, _, _) in enumerate(reqs)
            }
            rec["resps"] = [[_resp(lp, g)] for _, _, lp, g in reqs]
            rec["filtered_resps"] = [_resp(lp, g) for _, _, lp, g in reqs]
            methods = (r.extra or {}).get("methods") or {}
            for name in LM_EVAL_METHODS:
                if isinstance(methods.get(name), dict):
                    metrics.append(name)
                    values[name] = methods[name].get("correct")
        else:
            rec["target"] = str(r.gold)
            rec["arguments"] = {"gen_args_0": {"arg_0": r.prompt, "arg_1": {}}}
            rec["resps"] = [[str(r.prediction)]]
            rec["filtered_resps"] = [str(r.prediction)]
        rec["filter"] = "none"
        rec["metrics"] = metrics
        rec["doc_hash"] = _sha(json.dumps(doc, indent=2, ensure_ascii=False, default=str))
        rec["prompt_hash"] = _sha(r.prompt or "")
        rec["target_hash"] = _sha(rec["target"])
        rec.update(values)
        # llmscope's own keys, after lm-eval's
        rec["llmscope_item_id"] = r.item_id
        rec["variant"] = r.variant
        if r.error:
            rec["error"] = r.error
        out.setdefault(_task_name(run, r.variant, len(variants)), []).append(rec)
    for recs in out.values():  # lm-eval writes a task's samples in doc_id order
        recs.sort(key=lambda x: (x["doc_id"] is None, x["doc_id"] or 0, x["variant"]))
    return out


def lm_eval_results(
    run: dict[str, Any], rows: list[ExportRow], n_items: int | None, metrics: Any = None
) -> dict[str, Any]:
    """A summary shaped like lm-eval's results JSON (`results`, `n-samples`, `config`...).

    `acc,none` is the report's `accuracy` (`metrics`, the pipeline's RunMetrics of the run):
    per prompt variant when the run has several scored variants, else the run's; the group
    block is the run's. `acc_stderr,none` is lm-eval's IID standard error
    (`analysis.paired.iid_stderr`; the report's intervals cluster prompt variants of one
    item, so they are wider).
    """
    from llmscope.analysis.paired import iid_stderr

    variants = sorted({r.variant for r in rows})
    metric = _lm_eval_metric(run.get("task"))
    by_task: dict[str, list[ExportRow]] = {}
    for r in rows:
        by_task.setdefault(_task_name(run, r.variant, len(variants)), []).append(r)
    scored = {r.variant for r in rows if r.correct is not None and r.error is None}

    def value(rs: list[ExportRow], whole: bool) -> float | None:
        if metrics is None:
            return None
        # the plain per-item share (a WorldSense run names it item_accuracy beside the authors' metric)
        name = "item_accuracy" if metrics.get("item_accuracy") is not None else "accuracy"
        m = metrics.get(name)
        if not whole:
            vs = {r.variant for r in rs}
            if not vs & scored:
                return None
            if len(scored) > 1:  # the pipeline's per-variant row (one task per variant)
                m = metrics.get(name, {"variant": next(iter(vs))})
        return None if m is None else m.value

    def method_value(name: str, whole: bool) -> float | None:
        # the pipeline's accuracy under the method of that name (per run: no per-variant row)
        m = metrics.get("accuracy", {"method": name}) if metrics is not None and whole else None
        return None if m is None else m.value

    def block(name: str, rs: list[ExportRow], whole: bool = False) -> dict[str, Any]:
        vals = [float(r.correct) for r in rs if r.correct is not None and r.error is None]
        # lm-eval's task block: name, alias and sample_len (the documents scored) before the metrics
        out = {
            "name": name,
            "alias": name,
            "sample_len": sum(1 for r in rs if r.error is None),
            f"{metric},none": value(rs, whole or len(by_task) == 1),
            f"{metric}_stderr,none": iid_stderr(vals),
        }
        for mname in LM_EVAL_METHODS:
            mv = [(r.extra or {}).get("methods", {}).get(mname) for r in rs if r.error is None]
            mvals = [
                float(x["correct"])
                for x in mv
                if isinstance(x, dict) and x.get("correct") is not None
            ]
            if mvals:
                out[f"{mname},none"] = method_value(mname, whole or len(by_task) == 1)
                out[f"{mname}_stderr,none"] = iid_stderr(mvals)
        return out

    results = {t: block(t, rs) for t, rs in by_task.items()}
    group = str(run.get("suite_name") or "llmscope")
    out: dict[str, Any] = {"results": results}
    if len(by_task) > 1:
        out["groups"] = {group: block(group, rows, whole=True)}
        out["group_subtasks"] = {group: sorted(by_task)}
    out["n-shot"] = {t: 0 for t in by_task}
    out["higher_is_better"] = {
        t: {k.split(",")[0]: True for k in results[t] if k.endswith(",none") and "_stderr" not in k}
        for t in by_task
    }
    out["n-samples"] = {
        t: {"original": n_items if n_items is not None else len(rs), "effective": len(rs)}
        for t, rs in by_task.items()
    }
    out["config"] = {
        "model": run.get("backend"),
        "model_args": run.get("model"),
        "llmscope_run_id": run.get("run_id"),
        "llmscope_suite_id": run.get("suite_id"),
        "seed": run.get("seed"),
    }
    out["model_name"] = run.get("model")
    out["date"] = str(run.get("started_at")) if run.get("started_at") is not None else None
    return out


# -- writing --------------------------------------------------------------------------------
def _check_target(path: Path, force: bool) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise ExportError(f"cannot write {path}: {e.strerror}") from e
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise ExportError(
                f"{path} is a directory; give a file name, e.g. -o {path / 'run.jsonl'}"
            )
        if not stat.S_ISREG(st.st_mode):
            raise ExportError(f"{path} exists and is not a regular file; refusing to write to it")
        if not force:
            raise ExportError(f"{path} exists; pass --force to replace it")
    parent = path.parent
    if not parent.is_dir():
        raise ExportError(f"cannot write {path}: folder {parent} does not exist")


def _write_atomic(path: Path, write: Callable[[Path], None], force: bool) -> None:
    """Write through a temp file in the same folder, then rename: whole file or nothing."""
    _check_target(path, force)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        if not force and path.exists():  # appeared while writing: still never clobber
            raise ExportError(f"{path} exists; pass --force to replace it")
        os.replace(tmp, path)
    except OSError as e:
        reason = {
            errno.ENOSPC: "disk full",
            errno.EROFS: "read-only file system",
            errno.EDQUOT: "disk quota exceeded",
            errno.EFBIG: "file too large",
            errno.EACCES: "permission denied",
        }.get(e.errno or 0, e.strerror)
        raise ExportError(f"cannot write {path}: {reason}; nothing was written") from e
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass


def _write_text(text: str, output: str | None, force: bool) -> None:
    if not output:
        # standard output is read on a terminal: control characters (ESC) and bidi controls in
        # stored text are shown, never obeyed (a file written with -o keeps the bytes)
        sys.stdout.write(for_terminal(text.replace("\r\n", "\n")))
        return

    def write(tmp: Path) -> None:
        with open(tmp, "x", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    _write_atomic(Path(output), write, force)


def write_output(text: str, output: str | None, *, force: bool = False) -> None:
    """Text to `output` by the export's rules (whole file or nothing, never replaced without
    `force`, one-line `ExportError`), or to stdout when `output` is None."""
    _write_text(text, output, force)


def frame_csv(df: Any, text_columns: set[str], *, raw: bool = False) -> str:
    """A DataFrame as the export's CSV: numbers as shortest exact floats, missing empty, text
    cells in `text_columns` escaped against spreadsheet formulas unless `raw`."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")
    w.writerow(list(df.columns))
    for rec in df.itertuples(index=False):
        line = []
        for c, v in zip(df.columns, rec, strict=True):
            if v is None or (isinstance(v, float) and math.isnan(v)):
                line.append("")
            elif c in text_columns:
                line.append(str(v) if raw else csv_escape(str(v)))
            elif isinstance(v, bool) or type(v).__name__ == "bool_":
                line.append("true" if v else "false")
            else:
                line.append(repr(float(v)) if isinstance(v, float) else str(v))
        w.writerow(line)
    return buf.getvalue()


def export_run(
    store: Store,
    run: dict[str, Any],
    fmt: str,
    output: str | None,
    *,
    force: bool = False,
    raw: bool = False,
) -> int:
    """Write a run in `fmt` to `output` (stdout when None, text formats only); returns rows written."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "worldsense":
        return _export_worldsense(store, run, output, force)
    rows = export_rows(store, run)
    if fmt == "jsonl":
        _write_text(to_jsonl(rows), output, force)
    elif fmt == "csv":
        _write_text(to_csv(rows, raw=raw), output, force)
    elif fmt == "parquet":
        if not output:
            raise ExportError("--format parquet writes a binary file: pass -o FILE")
        import pyarrow.parquet as pq

        table = to_arrow(rows)
        _write_atomic(Path(output), lambda tmp: pq.write_table(table, tmp), force)
    elif fmt == "lm-eval":
        _export_lm_eval(store, run, rows, output, force)
    return len(rows)


def _export_lm_eval(
    store: Store, run: dict[str, Any], rows: list[ExportRow], output: str | None, force: bool
) -> None:
    if not output:
        raise ExportError(
            "--format lm-eval writes a folder (samples_<task>_<run>.jsonl, results_<run>.json): "
            "pass -o DIR"
        )
    folder = Path(output)
    if folder.exists() and not folder.is_dir():
        raise ExportError(f"{folder} exists and is not a folder; --format lm-eval writes a folder")
    if not folder.parent.is_dir():
        raise ExportError(f"cannot write {folder}: folder {folder.parent} does not exist")
    n_items = None
    if run.get("suite_id"):
        row = store.execute(
            "SELECT count(*) FROM items WHERE suite_id = ?", [run["suite_id"]]
        ).fetchone()
        n_items = int(row[0]) if row and row[0] else None
    samples = lm_eval_samples(store, run, rows)
    files = {
        f"samples_{task}_{run['run_id']}.jsonl": "".join(
            json.dumps(r, ensure_ascii=False) + "\n" for r in rs
        )
        for task, rs in samples.items()
    }
    from llmscope.analysis.metrics import run_metrics

    summary = lm_eval_results(
        run, rows, n_items, run_metrics(store, run, producers=["accuracy", "methods"])
    )
    files[f"results_{run['run_id']}.json"] = json.dumps(summary, indent=2, ensure_ascii=False)
    if folder.is_dir():
        for name in files:  # refuse before writing anything
            _check_target(folder / name, force)
    try:
        folder.mkdir(exist_ok=True)
    except OSError as e:
        raise ExportError(f"cannot create {folder}: {e.strerror}") from e
    for name, text in files.items():
        _write_text(text, str(folder / name), force)


def _export_worldsense(store: Store, run: dict[str, Any], output: str | None, force: bool) -> int:
    df = store.results_frame(run["run_id"], with_items=False)
    lines = []
    for item_id, pred, err in zip(
        df["item_id"].tolist(), df["prediction"].tolist(), df["error"].tolist(), strict=True
    ):
        # `_text`: missing text is NaN in a column that holds some (pandas' string dtype)
        resp = _text(pred) if _text(err) is None and _text(pred) is not None else ""
        lines.append(json.dumps({"Key": _key(item_id), "resp": resp}))
    _write_text("\n".join(lines) + ("\n" if lines else ""), output, force)
    return len(lines)


def _key(item_id: str) -> Any:
    return int(item_id) if item_id.lstrip("-").isdigit() else item_id
