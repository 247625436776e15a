"""The persistent metrics cache: a run's full computation stored in the database's sidecar
(`store/metrics_cache.py`, `<db>.metrics.sqlite`) under the rows' fingerprint and everything
else that decides the numbers (:func:`cache_config`), and read back as :class:`RunMetrics`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import pandas as pd

from llmscope.engine.tasks.registry import task_producers

from .definitions import BootstrapConfig
from .metric_values import Metric, RunMetrics, headline

# Artifacts kept in memory only: the per-tuple WorldSense table (40k rows a run) is needed only
# when two runs share a model and prompting; the report then rebuilds it from the rows.
UNCACHED_ARTIFACTS = frozenset({"worldsense_tuples"})
CACHE_VERSION = 1  # bump when a producer's numbers change, so old entries are not read


def cache_config(
    run: Mapping[str, Any], by: Sequence[str], bootstrap: BootstrapConfig, producers: Sequence[str]
) -> str:
    """What besides the rows decides the numbers: code version, run identity, grouping, bootstrap."""
    import hashlib

    ident = {
        k: run.get(k)
        for k in ("run_id", "model", "task", "suite_name", "suite_id", "backend", "options", "meta")
    }
    text = json.dumps(
        [
            CACHE_VERSION,
            code_fingerprint(),
            ident,
            list(by),
            asdict(bootstrap),
            list(producers),
            task_producers(run.get("task")),
        ],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


_CODE_FP: list[str] = []


def code_fingerprint() -> str:
    """A hash of the metrics code (every module of this package): a stored entry computed by
    other code is never read, so a fixed producer cannot leave its old numbers behind."""
    if not _CODE_FP:
        import hashlib
        from pathlib import Path

        h = hashlib.sha256()
        here = Path(__file__).parent  # analysis/: every metrics module
        for f in sorted(here.rglob("*.py")):  # the producers package too
            h.update(f.relative_to(here).as_posix().encode())
            h.update(f.read_bytes())
        _CODE_FP.append(h.hexdigest()[:16])
    return _CODE_FP[0]


def load_cached(
    side: Any, rid: str, config: str, fp: str, bootstrap: BootstrapConfig
) -> RunMetrics | None:
    """The sidecar's entry for exactly these rows and this configuration, or None."""
    got = side.get(rid, config, fp)
    if got is None:
        return None
    p, frames = got
    r = p["run"]
    rm = RunMetrics(
        r["run_id"],
        r["model"],
        r.get("suite"),
        r.get("task"),
        r["cluster_unit"],
        bootstrap,
        [Metric(**m) for m in p["metrics"]],
    )
    rm.artifacts = dict(p.get("artifacts") or {})
    for name in p.get("frames") or []:
        rm.artifacts[str(name)] = frame_from_bytes(frames[name])
    return rm


def frame_to_bytes(df: pd.DataFrame) -> bytes:
    """A frame as Arrow IPC (zstd): reads back ~50x faster than the same 40k WorldSense
    tuples as JSON records."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    table = pa.Table.from_pandas(df, preserve_index=False)
    with pa.ipc.new_stream(
        sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")
    ) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def frame_from_bytes(data: bytes) -> pd.DataFrame:
    import pyarrow as pa

    with pa.ipc.open_stream(pa.py_buffer(data)) as r:
        out: pd.DataFrame = r.read_all().to_pandas()
    return out


def save_cached(side: Any, rm: RunMetrics, config: str, fp: str) -> None:
    """Store a full computation in the sidecar (skipped, never waited for, when it is busy)."""
    h = headline(rm)
    scalars = {k: v for k, v in rm.artifacts.items() if not isinstance(v, pd.DataFrame)}
    frames = {
        k: frame_to_bytes(v)
        for k, v in rm.artifacts.items()
        if isinstance(v, pd.DataFrame) and k not in UNCACHED_ARTIFACTS
    }
    payload = {
        "version": CACHE_VERSION,
        "config": config,
        "fingerprint": fp,
        "headline": None
        if h is None
        else {"name": h.name, "value": h.value, "lo": h.lo, "hi": h.hi},
        "run": {
            "run_id": rm.run_id,
            "model": rm.model,
            "suite": rm.suite,
            "task": rm.task,
            "cluster_unit": rm.cluster_unit,
        },
        "metrics": [asdict(m) for m in rm.metrics],
        "artifacts": scalars,
        "frames": sorted(frames),
    }
    side.put(rm.run_id, config, fp, payload, frames)
