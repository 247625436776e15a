"""Pre-registration: `llmscope plan` writes a plan file; runs made with `--plan` store its hash
before any result; `report` tests the plan's hypotheses first and labels the rest exploratory.

A plan (YAML) holds the suite (name and content id), models, task options, analysis
metrics, hypotheses, seed and the test level. A hypothesis is a comparison with a
direction, `MEASURE(GROUP) > MEASURE(GROUP)` or `MEASURE(GROUP) < NUMBER`, where

- MEASURE is `accuracy` (per-item correctness), `p_yes` (P(yes) renormalised over
  the answers) or `expected` (expected rating);
- GROUP is a comma-separated list of `key=value` filters: `variant=q1` (a bare
  value means the variant), `method=calibrated` (the correctness under that
  scoring scheme, from extra.methods), or any item field (`category=Health`).

Test (`paired-t`): each side is reduced to one mean per cluster (item, or the
suite's cluster field); a comparison of two groups uses the clusters present in
both (paired t test over clusters, one-sided in the stated direction), a comparison
with a number a one-sample t test over clusters. A hypothesis is `supported` when
the one-sided p-value is below the plan's `alpha` (default 0.05). The interval is
the two-sided 95% t interval of the mean difference (the report's ci95 convention).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import stats

from llmscope.data.suites import parse_problem
from llmscope.store.codec import decode_json_cell

PLAN_VERSION = 1
MEASURES = ("accuracy", "p_yes", "expected")
PLAN_KEYS = (
    "llmscope_plan",
    "suite",
    "suite_id",
    "suite_path",
    "models",
    "task_options",
    "metrics",
    "hypotheses",
    "seed",
    "alpha",
    "created_at",
)
_SIDE = r"(?P<m{n}>[a-z_][a-z0-9_]*)\((?P<g{n}>[^()]*)\)"
_HYP = re.compile(
    r"^\s*"
    + _SIDE.format(n=1)
    + r"\s*(?P<op>[<>])\s*(?:"
    + _SIDE.format(n=2)
    + r"|(?P<num>[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?))\s*$"
)


class PlanError(ValueError):
    """A malformed plan or hypothesis (names the file and field)."""


@dataclass
class Side:
    measure: str
    group: dict[str, str]

    def text(self) -> str:
        return f"{self.measure}({', '.join(f'{k}={v}' for k, v in self.group.items())})"


@dataclass
class Hypothesis:
    hid: str
    text: str
    left: Side
    op: str
    right: Side | float


def parse_hypothesis(text: str, hid: str = "H1") -> Hypothesis:
    """Parse `accuracy(q1) > accuracy(variant=q2, method=raw)` or `p_yes(q1) < 0.5`."""
    m = _HYP.match(text)
    if not m:
        raise PlanError(
            f"hypothesis {hid} {text!r}: expected MEASURE(GROUP) > or < MEASURE(GROUP) or a number, "
            f"e.g. 'accuracy(q1) > accuracy(q2)'"
        )

    def side(n: int) -> Side:
        measure = m.group(f"m{n}")
        if measure not in MEASURES:
            raise PlanError(
                f"hypothesis {hid}: unknown measure {measure!r}; allowed: {', '.join(MEASURES)}"
            )
        group: dict[str, str] = {}
        for part in [p.strip() for p in m.group(f"g{n}").split(",") if p.strip()]:
            k, _, v = part.partition("=")
            if not _:
                k, v = "variant", part
            group[k.strip()] = v.strip()
        return Side(measure, group)

    right: Side | float = float(m.group("num")) if m.group("num") is not None else side(2)
    return Hypothesis(hid, text.strip(), side(1), m.group("op"), right)


def plan_hash(path: str | Path) -> str:
    """sha256 of the plan file's bytes (what the run records)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_plan(path: str | Path, plan: dict[str, Any], force: bool = False) -> str:
    """Write the plan file (refusing to overwrite without `force`); returns its hash."""
    p = Path(path)
    if p.exists() and not force:
        raise PlanError(f"{p} exists; a plan is not overwritten (pass --force to replace it)")
    for i, h in enumerate(plan.get("hypotheses") or [], 1):
        parse_hypothesis(h["text"], h.get("id", f"H{i}"))
    p.write_text(yaml.safe_dump(plan, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return plan_hash(p)


def read_plan(path: str | Path) -> dict[str, Any]:
    """Read and validate a plan file."""
    p = Path(path)
    text: str | None = None
    try:
        text = p.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
    except OSError as e:
        raise PlanError(f"{p}: cannot read: {e.strerror}") from e
    except UnicodeDecodeError:
        raise PlanError(f"{p}: not UTF-8 text, not an llmscope plan") from None
    except yaml.YAMLError as e:
        msg, line = parse_problem(e, text)
        raise PlanError(f"{p}{f', line {line}' if line else ''}: {msg}") from None
    if not isinstance(data, dict) or data.get("llmscope_plan") != PLAN_VERSION:
        raise PlanError(f"{p}: not an llmscope plan (needs 'llmscope_plan: {PLAN_VERSION}')")
    bad = [k for k in data if k not in PLAN_KEYS]
    if bad:
        raise PlanError(f"{p}, field '{bad[0]}': unknown plan key; allowed: {', '.join(PLAN_KEYS)}")
    if not isinstance(data.get("suite"), str):
        raise PlanError(f"{p}, field 'suite': required (a suite name or spec path)")
    if not isinstance(data.get("task_options") or {}, dict):
        raise PlanError(f"{p}, field 'task_options': must be a mapping")
    hyps = data.get("hypotheses") or []
    if not isinstance(hyps, list):
        raise PlanError(f"{p}, field 'hypotheses': must be a list")
    for i, h in enumerate(hyps, 1):
        if not isinstance(h, dict) or not isinstance(h.get("text"), str):
            raise PlanError(f"{p}, field 'hypotheses[{i}]': needs 'text'")
        try:
            parse_hypothesis(h["text"], str(h.get("id", f"H{i}")))
        except PlanError as e:
            raise PlanError(f"{p}, field 'hypotheses[{i}]': {e}") from e
    a = data.get("alpha", 0.05)
    if not isinstance(a, (int, float)) or not 0 < float(a) < 0.5:
        raise PlanError(f"{p}, field 'alpha': must be a number in (0, 0.5)")
    return data


def deviations(
    plan: dict[str, Any],
    *,
    suite_id: str,
    model: str | None,
    task_options: dict[str, Any],
    seed: int,
) -> list[str]:
    """How a run differs from its plan (empty when it follows it)."""
    out = []
    if plan.get("suite_id") and plan["suite_id"] != suite_id:
        out.append(f"suite content {suite_id} differs from the planned {plan['suite_id']}")
    models = plan.get("models") or []
    if models and (model or "default") not in [str(m) for m in models]:
        out.append(f"model {model or 'default'!r} is not among the planned models {models}")
    planned = plan.get("task_options") or {}
    for k in sorted(set(planned) | set(task_options)):
        if json.dumps(planned.get(k), sort_keys=True) != json.dumps(
            task_options.get(k), sort_keys=True
        ):
            out.append(
                f"task option {k}={json.dumps(task_options.get(k))} (planned {json.dumps(planned.get(k))})"
            )
    if "seed" in plan and int(plan["seed"]) != int(seed):
        out.append(f"seed {seed} (planned {plan['seed']})")
    return out


# -- evaluation -------------------------------------------------------------------------------
def _per_cluster(df: pd.DataFrame, side: Side, cluster_field: str | None) -> pd.Series:
    """Mean of the side's measure per cluster, over the rows its group selects."""
    from llmscope.analysis.metrics import cluster_key

    sub = df[df["error"].isna()]
    method = None
    for k, v in side.group.items():
        if k == "variant":
            sub = sub[sub["variant"].astype(str) == v]
        elif k == "method":
            method = v
        elif f"f.{k}" in sub:
            sub = sub[sub[f"f.{k}"].astype(str) == v]
        else:
            raise PlanError(f"hypothesis group key {k!r} is not variant, method or an item field")
    if side.measure == "accuracy":
        if method:
            vals = sub["extra"].map(
                lambda e: (
                    ((decode_json_cell(e) or {}).get("methods") or {})
                    .get(method, {})
                    .get("correct")
                )
            )
        else:
            vals = sub["correct"]
    elif side.measure == "p_yes":
        vals = sub.apply(
            lambda r: (
                (r["p_yes"] / (r["p_yes"] + r["p_no"]))
                if pd.notna(r.get("p_yes")) and (r["p_yes"] + r["p_no"]) > 0
                else np.nan
            ),
            axis=1,
        )
    else:
        vals = sub["extra"].map(lambda e: (decode_json_cell(e) or {}).get("expected"))
    vals = pd.to_numeric(pd.Series(vals, index=sub.index), errors="coerce")
    # the pipeline's units: an item without the cluster label is its own (a missing label is
    # NaN after astype(str), and groupby would drop its rows)
    cl = pd.Series(cluster_key(sub, cluster_field), index=sub.index)
    ok = vals.notna()
    return vals[ok].groupby(cl[ok]).mean()


def evaluate(
    h: Hypothesis, df: pd.DataFrame, cluster_field: str | None, alpha: float
) -> dict[str, Any]:
    """Test one hypothesis on a run's rows: estimate, interval, one-sided p-value, verdict."""
    left = _per_cluster(df, h.left, cluster_field)
    if isinstance(h.right, Side):
        right = _per_cluster(df, h.right, cluster_field)
        common = left.index.intersection(right.index)
        d = (left[common] - right[common]).to_numpy(float)
        test = "paired t over clusters"
    else:
        d = left.to_numpy(float) - float(h.right)
        test = "one-sample t over clusters"
    n = len(d)
    out: dict[str, Any] = {"id": h.hid, "hypothesis": h.text, "test": test, "n_clusters": n}
    if n < 2:
        return {
            **out,
            "estimate": float(d.mean()) if n else None,
            "ci": None,
            "p": None,
            "verdict": "not testable (fewer than 2 clusters)",
        }
    est = float(d.mean())
    sd = float(d.std(ddof=1))
    if sd == 0:
        p = 0.0 if (est > 0) == (h.op == ">") and est != 0 else 1.0
        ci = [est, est]
    else:
        res = stats.ttest_1samp(d, 0.0, alternative="greater" if h.op == ">" else "less")
        p = float(res.pvalue)
        t = float(stats.t.ppf(0.975, n - 1))
        se = sd / math.sqrt(n)
        ci = [est - t * se, est + t * se]
    return {
        **out,
        "estimate": est,
        "ci": ci,
        "p": p,
        "verdict": "supported" if p < alpha else "not supported",
    }


def plan_rows(
    df: pd.DataFrame, run: dict[str, Any], spec: dict[str, Any], rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """For a run made with a plan: its hypothesis rows first, then the other rows marked exploratory."""
    meta = run.get("meta") or {}
    plan = meta.get("plan") if isinstance(meta, dict) else None
    if not plan:
        return rows
    from llmscope.analysis.rows import metric_row

    body = plan.get("plan") or {}
    alpha = float(body.get("alpha", 0.05))
    out = []
    for i, hd in enumerate(body.get("hypotheses") or [], 1):
        h = parse_hypothesis(hd["text"], str(hd.get("id", f"H{i}")))
        ev = evaluate(h, df, spec.get("cluster_field"), alpha)
        r = metric_row(
            run["run_id"],
            str(run.get("model")),
            "hypothesis",
            ev["estimate"],
            ev["ci"],
            ev["n_clusters"],
            {"id": h.hid, "hypothesis": h.text, "verdict": ev["verdict"]},
        )
        r.update(
            suite=run.get("suite_name"),
            preregistered=True,
            p_value=ev["p"],
            test=ev["test"],
            plan_hash=plan.get("hash"),
        )
        out.append(r)
    dev = plan.get("deviations") or []
    for d in dev:
        r = metric_row(
            run["run_id"],
            str(run.get("model")),
            "plan_deviation",
            None,
            None,
            None,
            {"deviation": d},
        )
        r.update(suite=run.get("suite_name"), preregistered=True)
        out.append(r)
    for r in rows:
        r["preregistered"] = False
    return out + rows


class PlanRecorder:
    """A run reporter that stores the plan (hash, content, deviations) in `runs.meta` when the run
    starts, which is before the first result is written."""

    def __init__(
        self, store: Any, plan: dict[str, Any], digest: str, path: str, devs: list[str]
    ) -> None:
        self.store, self.plan, self.digest, self.path, self.devs = (
            store,
            plan,
            digest,
            path,
            list(devs),
        )

    def on_start(self, run: dict[str, Any], progress: Any) -> None:
        row = self.store.get_run(run["run_id"]) or run
        meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
        old = (meta or {}).get("plan")
        devs = list(self.devs)
        if old and old.get("hash") != self.digest:
            devs.append(
                f"the run was started under plan {old.get('hash', '?')[:12]}, resumed under {self.digest[:12]}"
            )
        if not old and progress.done:
            devs.append(f"the plan was attached after {progress.done} results were stored")
        meta = {
            **(meta or {}),
            "plan": {
                "hash": self.digest,
                "path": self.path,
                "plan": self.plan,
                "deviations": devs,
                "results_before_plan": int(progress.done) if not old else 0,
            },
        }
        self.store.update_run(run["run_id"], meta=meta)

    def on_results(self, results: Any, progress: Any) -> None:
        pass

    def on_progress(self, progress: Any) -> None:
        pass

    def on_message(self, level: str, text: str) -> None:
        pass

    def on_end(self, progress: Any) -> None:
        pass
