"""The metrics pipeline in SQL for runs whose producers all have a SQL form.

A WorldSense run (87k trials) needs only accuracy (overall, per variant, per group field)
and the authors' per-tuple table. Both are group-bys: DuckDB computes the per-cluster sums
and the per-tuple weighted sums over the stored columns, and only those small tables reach
numpy (the interval arithmetic of :func:`analysis.intervals.accuracy_ci_sums`, the authors'
group statistics over tuples). No per-row frame is built.

The numbers are the row pipeline's to the last bit: clusters and tuples come in order of
first appearance (``min(seq)``), the sums are of 0/1 scores and of WorldSense's dyadic
weights (exact in any order), and the answer and gold mappings are the Python ones applied
to each distinct (answer, gold) pair. Whatever the SQL form does not cover exactly (other
producers, booleans or floats as group values, items missing a cluster field, fractional
scores, rows without an item) returns None, and the caller builds the frame instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from llmscope.data.registry import suite_producers

from .intervals import accuracy_ci_sums
from .queries import BASE_COLUMNS, ResultProfile, _decode, decode_json_column

__all__ = ["SQL_PRODUCERS", "sql_run_metrics"]

# Producers with a SQL form here (the errors count is always one).
SQL_PRODUCERS = frozenset({"accuracy", "worldsense"})
# Distinct (answer, gold) pairs mapped in Python; a free-text run has too many to inline.
_MAX_PAIRS = 500


@dataclass(frozen=True)
class _FieldInfo:
    table: str  # the temporary table of the suite's item fields (see _items_table)
    n_items: int
    present: frozenset[str]  # fields with a non-null value in some item
    # Fields whose every non-null value is a string or an integer: their text
    # (json_extract_string) is what Python's str() of the decoded value gives, as the row
    # pipeline labels groups; booleans ("true" vs "True") and floats ("1e5" vs "100000.0") not.
    exact: frozenset[str]
    complete: frozenset[str]  # fields with a non-null value in every item
    one_type: frozenset[str]  # fields whose non-null values share one kind (string, integer, ...)
    arrays: frozenset[str]  # fields that are an array in every item
    column: dict[str, int]  # field -> k: the table's j<k> (JSON) and s<k> (text) columns


_FIELD_INFO: dict[tuple[str, str, tuple[str, ...], int], _FieldInfo] = {}
# Fields whose array length a producer reads (the WorldSense tuple size).
_ARRAY_FIELDS = ("expectedresp", "options")


def _path(f: str) -> str:
    return ("$." + json.dumps(f)).replace("'", "''")


def _items_table(store: Any, suite_id: str, names: Sequence[str], n_text: int) -> _FieldInfo:
    """The suite's item fields ``names`` extracted once into a temporary table of the store's
    connection (one JSON parse per item; every run of the suite joins it), and what they hold.
    The first ``n_text`` names (group and cluster fields) also get their text.

    Cached per (database, suite, names): a suite id is a hash of the suite's content, so its
    items do not change; the table is re-created if the connection is new.
    """
    import hashlib

    key = (str(getattr(store, "path", id(store))), suite_id, tuple(names), n_text)
    table = (
        "llmscope_items_"
        + hashlib.sha1(json.dumps([suite_id, list(names), n_text]).encode()).hexdigest()[:16]
    )
    paths = ", ".join("'" + _path(f) + "'" for f in names)
    # Text (json_extract_string) only for fields that can group or cluster rows: what
    # SQL groups by; array lengths only where a tuple's size is read.
    text = {*names[:n_text], "tuple_ID"}
    cols = ", ".join(
        f"v[{k + 1}] AS j{k}"
        + (f", json_extract_string(v[{k + 1}], '$') AS s{k}" if f in text else "")
        + (f", json_array_length(v[{k + 1}]) AS n{k}" if f in _ARRAY_FIELDS else "")
        for k, f in enumerate(names)
    )
    store.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {table} AS SELECT item_id, {cols} "
        f"FROM (SELECT item_id, json_extract(fields, [{paths}]) AS v FROM items WHERE suite_id = ?)",
        [suite_id],
    )
    if key in _FIELD_INFO and _FIELD_INFO[key].table == table:
        return _FIELD_INFO[key]
    parts = ["count(*)"]
    for k in range(len(names)):
        # The JSON kind from the extracted value's text (cheaper than json_type's parse):
        # s(tring), i(nteger), a(rray), o(ther: float, boolean, object); NULL when absent.
        t = (
            f"CASE WHEN j{k} IS NULL OR j{k} = 'null' THEN NULL WHEN starts_with(j{k}, '\"') THEN 's' "
            f"WHEN regexp_full_match(j{k}, '-?[0-9]+') THEN 'i' WHEN starts_with(j{k}, '[') THEN 'a' ELSE 'o' END"
        )
        parts += [
            f"count({t})",
            f"count(*) FILTER (WHERE {t} IN ('s', 'i'))",
            f"count(DISTINCT {t})",
            f"count(*) FILTER (WHERE {t} = 'a')",
        ]
    row = store.execute(f"SELECT {', '.join(parts)} FROM {table}").fetchone()
    n = int(row[0])
    present, exact, complete, one_type, arrays = set(), set(), set(), set(), set()
    for k, f in enumerate(names):
        nn, ne, nt, na = (int(v or 0) for v in row[1 + 4 * k : 5 + 4 * k])
        if nn:
            present.add(f)
        if ne == nn:
            exact.add(f)
        if nn == n:
            complete.add(f)
        if nt <= 1:
            one_type.add(f)
        if na == n:
            arrays.add(f)
    info = _FieldInfo(
        table,
        n,
        frozenset(present),
        frozenset(exact),
        frozenset(complete),
        frozenset(one_type),
        frozenset(arrays),
        {f: k for k, f in enumerate(names)},
    )
    if len(_FIELD_INFO) >= 8:
        _FIELD_INFO.pop(next(iter(_FIELD_INFO)))
    _FIELD_INFO[key] = info
    return info


def sql_run_metrics(
    store: Any,
    run: Mapping[str, Any],
    spec: Mapping[str, Any],
    by: Sequence[str],
    bootstrap: Any,
    producers: Sequence[str] | None,
    profile: ResultProfile,
) -> Any:
    """:func:`analysis.metrics.compute_metrics` of a stored run in SQL, or None where the SQL
    form would not give the row pipeline's numbers exactly (the caller then builds the frame)."""
    from .metric_values import RunMetrics
    from .metrics import BOOTSTRAP, PIPELINE_FIELDS, PRODUCERS, MetricContext, finish_metrics
    from .producers.worldsense import worldsense_from_tuples

    sid = run.get("suite_id")
    if not sid or profile.n == 0 or not hasattr(store, "query_numpy"):
        return None  # a store-like object without a DuckDB connection (tests' fakes)
    cf = spec.get("cluster_field")
    cf = cf if isinstance(cf, str) else None
    grouping = list(dict.fromkeys([*by, *([cf] if cf else [])]))
    names = list(dict.fromkeys([*grouping, *PIPELINE_FIELDS]))

    # A producer without a SQL form that is active whichever fields the items hold (a yes/no
    # run's calibration) sends the run to the row pipeline: decided before the items' fields
    # are extracted (~0.15 s of a 1M-row report, for nothing). Returning None is always safe.
    def beyond_sql(hint: frozenset[str]) -> bool:
        p0 = MetricContext(
            pd.DataFrame(), dict(run), dict(spec), list(by), BOOTSTRAP, store, profile, hint
        )
        return any(
            p.name not in SQL_PRODUCERS
            for p in PRODUCERS
            if (producers is None or p.name in producers) and p.active(p0)
        )

    if beyond_sql(frozenset()) and beyond_sql(frozenset(names)):
        return None
    info = _items_table(store, str(sid), names, len(grouping))
    probe = MetricContext(
        pd.DataFrame(), dict(run), dict(spec), list(by), BOOTSTRAP, store, profile, info.present
    )
    active = [
        p.name for p in PRODUCERS if (producers is None or p.name in producers) and p.active(probe)
    ]
    if not set(active) <= SQL_PRODUCERS:
        return None
    # Group fields as the row pipeline finds them: a result column by that name wins.
    groups = []
    for f in by:
        if f in BASE_COLUMNS:
            return None
        if f in info.present:
            if f not in info.exact:
                return None
            groups.append(f)
    if cf in info.present and (cf not in info.complete or cf not in info.exact):
        return None  # an item without a cluster label, or a label str() would spell differently
    if profile.n_binary is None or profile.n_fractional:
        return None  # a fractional score: its sums depend on the order they are added in
    rid = str(run["run_id"])
    rm = RunMetrics(
        rid,
        str(run.get("model")),
        run.get("suite_name"),
        run.get("task") or spec.get("task"),
        f"suite field {cf!r}" if cf else "item (prompt variants and permutations together)",
        bootstrap,
    )
    for name in active:
        if name == "accuracy":
            acc = _accuracy(
                store, rid, info, cf if cf in info.present else None, groups, profile.n_binary
            )
            if acc is None:
                return None
            rm.metrics.extend(acc)
        elif name == "worldsense":
            if "worldsense" not in suite_producers(run.get("suite_name")):
                continue  # the authors' metrics belong to their suite (as in worldsense_metrics)
            tuples = _worldsense_tuples(store, run, info, profile.n)
            if tuples is None:
                return None
            ctx = MetricContext(
                pd.DataFrame(),
                dict(run),
                dict(spec),
                list(by),
                bootstrap,
                store,
                profile,
                info.present,
            )
            rm.metrics.extend(worldsense_from_tuples(ctx, tuples, profile.n))
            rm.artifacts.update(ctx.artifacts)
    return finish_metrics(rm, profile.nonnull.get("error", 0), profile.n)


def _accuracy(
    store: Any, rid: str, info: _FieldInfo, cf: str | None, groups: list[str], n_scored: int
) -> list[Any] | None:
    """accuracy_metrics from one GROUP BY: per (variant, cluster, group fields) cell the count,
    the sum of 0/1 scores and the first row (``min(seq)``); every grouping's per-cluster sums
    are then bincounts of those cells (integers: exact in any order), clusters in order of
    first appearance as the row pipeline has them. None when a scored row has no item."""
    from .metric_values import Metric
    from .producers.accuracy import variant_spread

    cl = f"i.s{info.column[cf]}" if cf else "r.item_id"
    cols = "".join(f", i.s{info.column[f]} AS g{k}" for k, f in enumerate(groups))
    sql = (
        f"SELECT r.variant, {cl} AS cl{cols}, count(*) AS m, sum(r.correct) AS y, min(r.seq) AS s "
        f"FROM results r JOIN {info.table} i ON i.item_id = r.item_id "
        "WHERE r.run_id = ? AND r.error IS NULL AND r.correct IN (0, 1) GROUP BY ALL ORDER BY s"
    )
    res = store.query_numpy(sql, [rid])
    if int(res["m"].sum()) != n_scored:
        return None  # rows whose item is not stored: the row pipeline labels them differently
    if len(res["m"]) == 0:
        return []
    y_cell = res["y"].astype(float)
    m_cell = res["m"].astype(float)
    cl_codes = pd.factorize(res["cl"], sort=False)[0]
    n_cl = int(cl_codes.max()) + 1
    out: list[Any] = []

    def add(y: np.ndarray, m: np.ndarray, group: dict[str, Any]) -> None:
        iv = accuracy_ci_sums(y, m, float(y.sum()), int(m.sum()))
        lo, hi = (None, None) if iv.lo != iv.lo else (iv.lo, iv.hi)
        out.append(
            Metric("accuracy", iv.mean, lo, hi, iv.method, iv.n, iv.n_clusters, group, "accuracy")
        )

    add(np.bincount(cl_codes, weights=y_cell), np.bincount(cl_codes, weights=m_cell), {})
    for j, (col, f) in enumerate(
        zip(["variant", *(f"g{k}" for k in range(len(groups)))], ["variant", *groups], strict=True)
    ):
        gcodes, gvals = pd.factorize(
            pd.Series(res[col], dtype=object), sort=False
        )  # None -> -1: no group
        if j == 0 and len(gvals) <= 1:
            continue  # one prompt variant: no per-variant rows
        keep = gcodes >= 0
        pair, _ = pd.factorize(gcodes[keep].astype(np.int64) * n_cl + cl_codes[keep], sort=False)
        y = np.bincount(pair, weights=y_cell[keep])
        m = np.bincount(pair, weights=m_cell[keep])
        pair_group = np.empty(len(y), dtype=np.int64)
        pair_group[pair] = gcodes[keep]
        for g in sorted(range(len(gvals)), key=lambda c: str(gvals[c])):
            sel = pair_group == g
            add(y[sel], m[sel], {f: str(gvals[g])})
    return out + variant_spread(out)


def _worldsense_tuples(
    store: Any, run: Mapping[str, Any], info: _FieldInfo, n_rows: int
) -> pd.DataFrame | None:
    """``worldsense.tuple_table`` of a run's trials in SQL (None where it would not be exact)."""
    from .worldsense import BIAS_MAP, RESP_MAP, WEIGHT_MAP, _norm_resp

    exp = "expectedresp" if "expectedresp" in info.present else "options"
    if "tuple_ID" not in info.complete or "tuple_ID" not in info.one_type or exp not in info.arrays:
        return None
    rid = str(run["run_id"])
    pairs = store.execute(
        "SELECT DISTINCT CASE WHEN error IS NULL THEN prediction END, gold FROM results WHERE run_id = ?",
        [rid],
    ).fetchall()
    if len(pairs) > _MAX_PAIRS:
        return None
    values, params = [], []
    for resp, gold in pairs:
        r = _norm_resp("" if resp is None else resp)
        rc, gc = RESP_MAP.get(r), (RESP_MAP.get(gold) if gold is not None else None)
        w = WEIGHT_MAP.get(gold) if gold is not None else None
        values.append("(?::VARCHAR, ?::VARCHAR, ?::DOUBLE, ?::DOUBLE, ?::DOUBLE)")
        params += [resp, gold, w, 1.0 if rc is not None and rc == gc else 0.0, BIAS_MAP.get(r)]
    t, e = info.column["tuple_ID"], info.column[exp]
    pn, ps = info.column["problemname"], info.column["problemsize"]
    # tuple ids of one JSON type: its text partitions them as the decoded values do
    sql = (
        f"WITH mp(resp, gold, w, a, b) AS (VALUES {', '.join(values)}), "
        f"agg AS (SELECT i.s{t} AS tid, arg_min(r.item_id, r.seq) AS key, count(*) AS n, "
        f"min(i.n{e}) AS lo, max(i.n{e}) AS hi, coalesce(sum(mp.w), 0) AS sw, coalesce(sum(mp.a * mp.w), 0) AS sacc, "
        "coalesce(sum(mp.b * mp.w), 0) AS sbias, min(r.seq) AS s "
        f"FROM results r JOIN {info.table} i ON i.item_id = r.item_id "
        "JOIN mp ON mp.resp IS NOT DISTINCT FROM (CASE WHEN r.error IS NULL THEN r.prediction END) "
        f"AND mp.gold IS NOT DISTINCT FROM r.gold WHERE r.run_id = ? GROUP BY i.s{t}) "
        # A JSON string without escapes decodes to its text (queries._decode's shortcut).
        f"SELECT agg.*, CASE WHEN starts_with(i.j{t}, '\"') AND NOT contains(i.j{t}, '\\') THEN agg.tid END "
        f"AS tfast, i.j{t} AS tj, i.j{e} AS ej, i.j{pn} AS pn, i.j{ps} AS ps "
        f"FROM agg JOIN {info.table} i ON i.item_id = agg.key ORDER BY agg.s"
    )
    agg = store.query_numpy(sql, [*params, rid])
    if int(agg["n"].sum()) != n_rows:
        return None  # rows whose item is not stored
    if (agg["lo"] != agg["hi"]).any():
        return None  # trials of one tuple disagree on its size: the row form decides per trial
    keep = agg["n"] == agg["lo"]
    agg = {k: v[keep] for k, v in agg.items()}

    def decoded(col: str) -> pd.Series:
        return decode_json_column(pd.Series(agg[col], dtype=object))

    # Tuple ids are all distinct: their text where that is the decoded value, else each decoded.
    tids = agg["tfast"].astype(object)
    for k in np.flatnonzero(pd.isna(tids)):
        tids[k] = _decode(agg["tj"][k])

    out = pd.DataFrame(
        {
            "modelname": str(run.get("model")),
            "prompting": "run",
            "tuple_ID": pd.Series(tids, dtype=object),
            "Key": agg["key"],
            "expectedresp": decoded("ej"),
            "problemname": decoded("pn") if "problemname" in info.present else None,
            "problemsize": decoded("ps") if "problemsize" in info.present else None,
        }
    )
    sw = agg["sw"].astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["acc"] = agg["sacc"].astype(float) / sw
        out["bias"] = agg["sbias"].astype(float) / sw
    out["n_trials"] = agg["n"].astype(np.int64)
    return out
