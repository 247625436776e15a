"""`llmscope export`: a run's per-item rows as JSONL, CSV, Parquet or WorldSense results."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from llmscope.store.db import Store

JSON_COLS = ("probs", "top_tokens", "option_scores", "extra")


def _load(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return v
    return None if v is None or (isinstance(v, float) and v != v) else v


def export_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    """One dict per stored result, nested fields decoded."""
    df = store.results_frame(run_id, with_items=False)
    rows = []
    for rec in df.to_dict(orient="records"):
        row: dict[str, Any] = {
            "run_id": rec["run_id"],
            "item_id": rec["item_id"],
            "variant": rec["variant"],
            "prompt": rec["prompt"],
        }
        for c in JSON_COLS:
            row[c] = _load(rec[c])
        row["other"] = _load(rec["other"])
        scores = row["option_scores"] or None
        row["option_logprobs"] = (
            {o: s.get("logprob") for o, s in scores.items()} if isinstance(scores, dict) else None
        )
        for c in ("prediction", "gold", "correct", "confidence", "n_tokens", "latency_ms", "error"):
            row[c] = _load(rec[c])
        rows.append(row)
    return rows


def export_run(store: Store, run: dict[str, Any], fmt: str, output: str | None) -> int:
    """Write a run in `fmt` to `output` (stdout when None, text formats only)."""
    run_id = run["run_id"]
    if fmt == "worldsense":
        return _export_worldsense(store, run, output)
    rows = export_rows(store, run_id)
    if fmt == "jsonl":
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        _write_text(text, output)
        return len(rows)
    flat = pd.DataFrame(rows)
    for c in (*JSON_COLS, "option_logprobs"):
        if c in flat:
            flat[c] = flat[c].map(lambda v: None if v is None else json.dumps(v, ensure_ascii=False))
    if fmt == "csv":
        _write_text(flat.to_csv(index=False), output)
    elif fmt == "parquet":
        if not output:
            raise ValueError("parquet export needs -o FILE")
        flat.to_parquet(output, index=False)
    return len(rows)


def _export_worldsense(store: Store, run: dict[str, Any], output: str | None) -> int:
    df = store.results_frame(run["run_id"], with_items=False)
    lines = []
    for rec in df.to_dict(orient="records"):
        resp = rec["prediction"] if rec["error"] is None and rec["prediction"] is not None else ""
        lines.append(json.dumps({"Key": _key(rec["item_id"]), "resp": resp}))
    _write_text("\n".join(lines) + ("\n" if lines else ""), output)
    return len(lines)


def _key(item_id: str) -> Any:
    return int(item_id) if item_id.lstrip("-").isdigit() else item_id


def _write_text(text: str, output: str | None) -> None:
    if output:
        Path(output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
