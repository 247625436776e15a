"""How an API run was scored: the method each item used and the top-k mass the rule saw.

Pure functions over a run's stored rows (`Store.results_frame`-shaped frame with the
`extra` JSON column) and its `runs` record, so report, TUI and export show the same numbers.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

import pandas as pd

from llmscope.analysis.rows import metric_row
from llmscope.store.db import decode_json

__all__ = ["api_method_rows", "fleet_notes", "method_banner", "item_method"]

# replica events that change which answers are the run's (engine/fleet.py)
_FLEET_EVENTS = ("left_out", "model_changed")


def _extras(df: pd.DataFrame) -> list[dict[str, Any]]:
    if df.empty or "extra" not in df:
        return []
    ok = df[df["error"].isna()] if "error" in df else df
    out = []
    for raw in ok["extra"]:
        if isinstance(raw, dict):
            out.append(raw)
        elif isinstance(raw, str) and raw:
            try:
                v = decode_json(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(v, dict):
                out.append(v)
    return out


def item_method(extra: dict[str, Any]) -> str | None:
    """The scoring method one stored row records (`choice_method` wins over `method`)."""
    m = extra.get("choice_method") or extra.get("method")
    return str(m) if m else None


def _meta(run: dict[str, Any], key: str) -> dict[str, Any]:
    meta = run.get("meta")
    if isinstance(meta, str):
        try:
            meta = decode_json(meta)
        except json.JSONDecodeError:
            meta = None
    be = meta.get(key) if isinstance(meta, dict) else None
    return be if isinstance(be, dict) else {}


def _backend_meta(run: dict[str, Any]) -> dict[str, Any]:
    return _meta(run, "backend")


def fleet_notes(run: dict[str, Any]) -> list[str]:
    """One line per replica of a fleet that did not serve the run's model: left out at the
    start, or taken out when it changed model mid-run (its answers since were not used)."""
    meta = run.get("meta")
    if isinstance(meta, str):
        try:
            meta = decode_json(meta)
        except json.JSONDecodeError:
            return []
    if not isinstance(meta, dict):
        return []
    stats = [s.get("backend_stats") for s in meta.get("sessions") or [] if isinstance(s, dict)]
    stats.append(meta.get("backend_stats"))
    seen: set[tuple[Any, ...]] = set()
    lines = []
    for st in stats:
        events = st.get("endpoint_events") if isinstance(st, dict) else None
        for e in events or []:
            if not isinstance(e, dict) or e.get("event") not in _FLEET_EVENTS:
                continue
            key = (e.get("event"), e.get("url"), e.get("at"))
            if key in seen:
                continue
            seen.add(key)
            if e["event"] == "left_out":
                lines.append(f"fleet: {e.get('url')} left out at the start: {e.get('reason')}")
            else:
                lines.append(
                    f"fleet: {e.get('url')} taken out mid-run: {e.get('reason')}; its answers "
                    "since were not used (scored again on the other replicas)"
                )
    if not lines:  # a run still going: the start's decisions are in the backend record
        for r in _backend_meta(run).get("replicas") or []:
            if isinstance(r, dict) and r.get("excluded"):
                lines.append(f"fleet: {r.get('url')} left out at the start: {r['excluded']}")
    return lines


def method_banner(run: dict[str, Any]) -> str | None:
    """One line for an API run: the method chosen for its task, why, and any adaptation."""
    be = _backend_meta(run)
    choice = be.get("method_choice") or {}
    if not choice.get("method"):
        return None
    line = f"API method: {choice['method']}"
    if choice.get("reason"):
        line += f" ({choice['reason']})"
    # adaptations made after the run started are in the end-of-run stats
    adapt = list(be.get("adaptations") or [])
    adapt += [a for a in _meta(run, "backend_stats").get("adaptations") or [] if a not in adapt]
    if adapt:
        line += "; adapted: " + "; ".join(str(a) for a in adapt)
    fleet = fleet_notes(run)
    if fleet:
        line += "; " + "; ".join(fleet)
    return line


def api_method_rows(
    df: pd.DataFrame, run: dict[str, Any], spec: dict[str, Any]
) -> list[dict[str, Any]]:
    """`method_share` per scoring method (fraction of scored rows, n = rows with it) and
    `topk_seen_mass`: the mean top-k probability mass the top-k rule saw (rows scored from
    log-probs only; 1 - it is the mass the rule had to assume)."""
    del spec  # same signature as the other pipeline metrics
    if run.get("backend") != "openai":
        return []  # only the API backend applies top-k rules or chooses methods
    extras = _extras(df)
    if not extras:
        return []
    rid, model = str(run.get("run_id")), str(run.get("model"))
    rows = []
    counts = Counter(m for m in (item_method(e) for e in extras) if m)
    total = sum(counts.values())
    for m, c in sorted(counts.items()):
        rows.append(metric_row(rid, model, "method_share", c / total, None, c, {"method": m}))
    mass = [
        float(e["topk_mass"])
        for e in extras
        if isinstance(e.get("topk_mass"), int | float) and math.isfinite(float(e["topk_mass"]))
    ]
    if mass:
        rows.append(
            metric_row(rid, model, "topk_seen_mass", sum(mass) / len(mass), None, len(mass))
        )
    for r in rows:
        r["suite"] = run.get("suite_name")
    return rows
