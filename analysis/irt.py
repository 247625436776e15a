"""Item response theory across runs of one suite: Rasch (1PL) and 2PL fits of the runs x items
matrix of per-item correctness, item difficulty and discrimination, each run's ability, with
intervals; items that discriminate negatively are flagged as likely label errors.

The fits are marginal maximum likelihood by Bock-Aitkin EM on 61 quadrature points (`fit_em`,
written here for memory and precision: see the comment above it), standard errors from each
item's block of the observed information (Louis' formula), Wald intervals; abilities are MAP
scores under the N(0, 1) prior with their standard error from the posterior's curvature. Checked
against an independent marginal-ML fit and against mirt on simulated data
(`tests/analysis/test_irt.py`), and against mirt on the published commonsense answers
(`tests/analysis/test_irt_fit.py`).

What an IRT item is here: one stored (item, prompt variant) pair, named `item_id` when the suite
has one variant and `item_id/variant` otherwise: each prompt variant or option order is a question
of its own. A response is the row's `correct` (an abstention counts 0, as in `accuracy`); error
rows and rows without gold are missing. Items every run answers alike (all right or all wrong)
carry no information about difficulty and are left out of the fit, listed in `constant_items`.

Negative discrimination: the fit bounds every discrimination below by a small positive number
(`SLOPE_BOUNDS`, as mirt and girth do), so an item whose responses fall as ability rises cannot be fitted as it is. Such an
item is fitted reversed (1 - x): with P(x' = 1) = σ(a'(θ - b)), the item itself follows
P(x = 1) = σ(-a'(θ - b)), a 2PL item with discrimination -a' and the same difficulty (its interval
is [-hi', -lo']). Which items are reversed is decided by the sign of their correlation with the
rest score (the number right on the other items), the classical check for a miskeyed item; an
item is *flagged* as a likely label error when its whole 95% interval lies below zero.

Rasch here is the 1PL with one discrimination common to all items and abilities N(0, 1): the
Rasch model with the ability variance estimated, written on the standardised ability scale, so
difficulties and abilities share one scale with the 2PL's. It cannot express a negative
discrimination; the flags come from the 2PL fit.

Expected accuracy (the probability of the gold answer) is shown beside the fit where a run stores
it (the scoring method's `expected_acc` in a row's `extra`, else P(gold) in its `probs`); the libraries fit 0/1
responses, so it is described, not fitted.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .irt_em import (
    INTERCEPT_BOUND,
    MAX_CYCLES,
    QUAD_POINTS,
    SLOPE_BOUNDS,
    TOLERANCE,
    fit_em,
    map_abilities,
)

MODELS = ("rasch", "2pl")
Z95 = 1.959963984540054


class IrtError(ValueError):
    """Input that cannot be fitted (too few runs or items, runs of different suites)."""


@dataclass(frozen=True)
class ResponseMatrix:
    """Runs x items correctness (1, 0, NaN = missing) and expected accuracy (NaN = not stored)."""

    runs: list[str]
    models: list[str]
    items: list[str]
    correct: np.ndarray
    expected: np.ndarray
    suite: str = ""


@dataclass(frozen=True)
class ItemParams:
    """One IRT item: difficulty and discrimination with 95% intervals (None where the library
    gives none, e.g. a discrimination at its bound)."""

    item: str
    item_id: str
    variant: str
    difficulty: float
    difficulty_ci: tuple[float | None, float | None]
    discrimination: float
    discrimination_ci: tuple[float | None, float | None]
    n: int  # runs that answered it
    p_correct: float  # share of those runs right
    expected_accuracy: float | None  # mean over runs that store it
    rest_correlation: float | None  # correlation with the rest score (the classical check)
    reversed: bool  # fitted as 1 - x (negative discrimination, see the module's docstring)
    flagged: bool  # likely label error: the discrimination's interval lies below 0
    at_bound: bool = False  # the fit stopped at a bound (`SLOPE_BOUNDS`): no interval


@dataclass(frozen=True)
class Ability:
    """One run's ability (MAP) with its 95% interval (MAP ± 1.96 SE)."""

    run_id: str
    model: str
    theta: float
    ci: tuple[float, float]
    se: float
    n: int  # items it answered (of those fitted)
    accuracy: float  # over those items
    expected_accuracy: float | None
    fit_accuracy: float = math.nan  # mean P(right | theta) over its items, by the fitted model


@dataclass(frozen=True)
class IrtFit:
    """A fitted model: items, abilities and the items left out."""

    model: str
    suite: str
    items: list[ItemParams]
    abilities: list[Ability]
    constant_items: list[str] = field(default_factory=list)
    log_likelihood: float | None = None
    converged: bool | None = None
    cycles: int | None = None  # EM cycles run
    excluded: dict[str, int] = field(default_factory=dict)
    """Items left out before the fit, by reason: `right_by_every_run`, `wrong_by_every_run`,
    `answered_by_fewer_than_2_runs` (the counts of `constant_items`)."""
    ability_accuracy_rho: float | None = None
    """Spearman correlation of the abilities with the runs' accuracy over the fitted items: the
    scale is oriented so that it is positive when the trait is correctness (see `fit_irt`)."""
    method: str = ""
    warnings: list[str] = field(default_factory=list)  # shown on every surface with the fit
    notes: list[str] = field(default_factory=list)  # what the header says about the item set

    @property
    def flagged(self) -> list[ItemParams]:
        """Items flagged as likely label errors."""
        return [i for i in self.items if i.flagged]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (NaN as None)."""
        return _clean(asdict(self))


def _clean(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, (float, np.floating)):
        return None if not math.isfinite(float(v)) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


# -- the matrix from stored runs ------------------------------------------------------------------
def _expected_acc(probs: Any, gold: Any, extra: Any) -> float:
    """What the row stores as its expected accuracy: the choice method's `expected_acc` in
    `extra`, else the probability of the gold answer in `probs`; NaN when it stores neither."""
    if isinstance(extra, Mapping):
        methods = extra.get("methods")
        m = methods.get(extra.get("choice_method")) if isinstance(methods, Mapping) else None
        v = m.get("expected_acc") if isinstance(m, Mapping) else None
        if isinstance(v, (int, float)) and math.isfinite(v):
            return float(v)
    if isinstance(probs, Mapping) and gold is not None:
        v = probs.get(str(gold))
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else math.nan
    return math.nan


def response_matrix(store: Any, runs: Sequence[Mapping[str, Any]]) -> ResponseMatrix:
    """The runs x items matrix of stored runs of one suite (see the module's docstring)."""
    from llmscope.store.db import decode_json_many

    if len(runs) < 2:
        raise IrtError(f"IRT needs at least 2 runs of one suite, got {len(runs)}")
    suites = {str(r.get("suite_id")) for r in runs}
    if len(suites) > 1:
        names = ", ".join(f"{r['run_id']} ({r.get('suite_name')})" for r in runs)
        raise IrtError(f"runs of different suites cannot share item parameters: {names}")
    frames = []
    for r in runs:
        df = store.query_df(
            "SELECT item_id, variant, correct, error, gold, probs, extra FROM results "
            "WHERE run_id = ?",
            [r["run_id"]],
        )
        # read from what each row stores, not from the task's name (the task registry is the
        # single source of what a task is: tests/engine/tasks/test_registry.py)
        probs = decode_json_many(df["probs"])
        extra = decode_json_many(df["extra"])
        exp = [_expected_acc(p, g, e) for p, g, e in zip(probs, df["gold"], extra, strict=True)]
        ok = df["error"].isna() & df["correct"].notna()
        bad = df.loc[ok & ~df["correct"].isin([0.0, 1.0]), "correct"]
        if len(bad):
            raise IrtError(
                f"run {r['run_id']}: correctness {bad.iloc[0]!r} is not 0 or 1; IRT fits right/wrong"
            )
        frames.append(
            pd.DataFrame(
                {
                    "run": r["run_id"],
                    "item_id": df["item_id"].astype(str),
                    "variant": df["variant"].astype(str),
                    "correct": df["correct"].where(ok).astype(float),
                    "expected": pd.Series(exp, dtype=float).where(ok.to_numpy()),
                }
            )
        )
    long = pd.concat(frames, ignore_index=True)
    one_variant = long["variant"].nunique() <= 1
    long["item"] = long["item_id"] if one_variant else long["item_id"] + "/" + long["variant"]
    order = list(dict.fromkeys(long.sort_values(["item_id", "variant"], kind="stable")["item"]))
    run_ids = [str(r["run_id"]) for r in runs]
    cor = long.pivot_table(
        index="run", columns="item", values="correct", aggfunc="first", dropna=False
    )
    expd = long.pivot_table(
        index="run", columns="item", values="expected", aggfunc="first", dropna=False
    )
    cor = cor.reindex(index=run_ids, columns=order)
    expd = expd.reindex(index=run_ids, columns=order)
    return ResponseMatrix(
        runs=run_ids,
        models=[str(r.get("model")) for r in runs],
        items=order,
        correct=cor.to_numpy(dtype=float),
        expected=expd.to_numpy(dtype=float),
        suite=str(runs[0].get("suite_name") or ""),
    )


# -- fitting --------------------------------------------------------------------------------------
def _rest_correlation(x: np.ndarray) -> np.ndarray:
    """Each item's Pearson correlation with the rest score (missing answers skipped; the rest
    score is the share right on the other answered items)."""
    answered = ~np.isnan(x)
    right = np.nan_to_num(x)
    n_rest = answered.sum(axis=1)[:, None] - answered  # runs x items, the totals summed once
    with np.errstate(invalid="ignore", divide="ignore"):
        rest = (right.sum(axis=1)[:, None] - right) / np.where(n_rest > 0, n_rest, np.nan)
    keep = answered & ~np.isnan(rest)
    k = keep.sum(axis=0)
    xa = np.where(keep, right, 0.0)
    ra = np.where(keep, rest, 0.0)
    kk = np.maximum(k, 1)
    mx, mr = xa.sum(0) / kk, ra.sum(0) / kk
    cov = (xa * ra).sum(0) / kk - mx * mr
    vx = (xa * xa).sum(0) / kk - mx**2
    vr = (ra * ra).sum(0) / kk - mr**2
    ok = (k >= 3) & (vx > 1e-15) & (vr > 1e-15)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok, cov / np.sqrt(np.where(ok, vx * vr, 1.0)), np.nan)


def _ci(lo: Any, hi: Any) -> tuple[float | None, float | None]:
    lo_f, hi_f = float(lo), float(hi)
    if not (math.isfinite(lo_f) and math.isfinite(hi_f)):
        return (None, None)
    return (lo_f, hi_f)


def fit_irt(matrix: ResponseMatrix, model: str = "2pl") -> IrtFit:
    """Fit `model` ("rasch" or "2pl") to the matrix by marginal ML (`fit_em`)."""

    if model not in MODELS:
        raise IrtError(f"IRT model must be one of {', '.join(MODELS)}, got {model!r}")
    x = matrix.correct
    if len(matrix.runs) < 2:
        raise IrtError(f"IRT needs at least 2 runs, got {len(matrix.runs)}")
    n_ans = (~np.isnan(x)).sum(axis=0)
    p = np.nansum(x, axis=0) / np.where(n_ans > 0, n_ans, np.nan)
    varies = (n_ans >= 2) & (p > 0) & (p < 1)
    constant = [it for it, v in zip(matrix.items, varies, strict=True) if not v]
    cols = np.flatnonzero(varies)
    if len(cols) < 2:
        raise IrtError(
            f"only {len(cols)} item(s) separate the runs (answered right by some runs and wrong by "
            f"others); IRT needs at least 2 (of {len(matrix.items)} items)"
        )
    xs = x[:, cols]
    rest = _rest_correlation(xs)
    rev = (rest < 0) if model == "2pl" else np.zeros(len(cols), dtype=bool)
    fit_x = np.where(rev[None, :] & ~np.isnan(xs), 1.0 - xs, xs)
    em = fit_em(fit_x, common_slope=(model == "rasch"))
    theta, se = map_abilities(fit_x, em.slope, em.intercept)
    disc = em.slope
    diff = -em.intercept / em.slope
    # difficulty b = -d / a: its variance by the delta method, gradient (d / a^2, -1 / a)
    g = np.stack([em.intercept / em.slope**2, -1.0 / em.slope], axis=1)
    var_b = np.einsum("ki,kij,kj->k", g, em.cov, g)
    var_a = em.cov[:, 0, 0]
    lo_a, hi_a = SLOPE_BOUNDS
    at_bound = (disc <= lo_a * (1 + 1e-6)) | (disc >= hi_a * (1 - 1e-6))
    at_bound |= np.abs(em.intercept) >= INTERCEPT_BOUND * (1 - 1e-6)
    # no interval at a bound: the maximum is not interior there
    half_a = np.where(at_bound, np.nan, Z95 * np.sqrt(var_a))
    half_b = np.where(at_bound, np.nan, Z95 * np.sqrt(var_b))
    ci = {
        "discrimination": (disc - half_a, disc + half_a),
        "difficulty": (diff - half_b, diff + half_b),
    }
    items = []
    for k, j in enumerate(cols):
        name = matrix.items[j]
        item_id, _, variant = name.partition("/")
        d_ci = _ci(ci["discrimination"][0][k], ci["discrimination"][1][k])
        a = disc[k]
        if rev[k]:
            a = -a
            d_ci = (None, None) if d_ci[0] is None else (-d_ci[1], -d_ci[0])  # type: ignore[operator]
        col_exp = matrix.expected[:, j]
        items.append(
            ItemParams(
                item=name,
                item_id=item_id,
                variant=variant,
                difficulty=float(diff[k]),
                difficulty_ci=_ci(ci["difficulty"][0][k], ci["difficulty"][1][k]),
                discrimination=float(a),
                discrimination_ci=d_ci,
                n=int(n_ans[j]),
                p_correct=float(p[j]),
                expected_accuracy=float(np.nanmean(col_exp))
                if np.isfinite(col_exp).any()
                else None,
                rest_correlation=None if not math.isfinite(rest[k]) else float(rest[k]),
                reversed=bool(rev[k]),
                flagged=bool(a < 0 and d_ci[1] is not None and d_ci[1] < 0),
                at_bound=bool(at_bound[k]),
            )
        )
    # P(right | theta) of each run on each item, back on the items' own orientation
    p_fit = 1.0 / (1.0 + np.exp(-(np.outer(theta, em.slope) + em.intercept[None, :])))
    p_fit = np.where(rev[None, :], 1.0 - p_fit, p_fit)
    abilities = []
    for i, rid in enumerate(matrix.runs):
        row = xs[i]
        answered = ~np.isnan(row)
        exp_row = matrix.expected[i]
        abilities.append(
            Ability(
                run_id=rid,
                model=matrix.models[i],
                theta=float(theta[i]),
                ci=(float(theta[i] - Z95 * se[i]), float(theta[i] + Z95 * se[i])),
                se=float(se[i]),
                n=int(answered.sum()),
                accuracy=float(np.nanmean(row)) if answered.any() else math.nan,
                expected_accuracy=float(np.nanmean(exp_row))
                if np.isfinite(exp_row).any()
                else None,
                fit_accuracy=float(np.mean(p_fit[i][answered])) if answered.any() else math.nan,
            )
        )
    return IrtFit(
        model=model,
        suite=matrix.suite,
        items=items,
        abilities=abilities,
        constant_items=constant,
        log_likelihood=em.log_likelihood,
        converged=em.converged,
        cycles=em.cycles,
        excluded=_excluded(varies, p),
        ability_accuracy_rho=_accuracy_rho(abilities),
        method=f"marginal ML, Bock-Aitkin EM ({QUAD_POINTS} quadrature points, tolerance "
        f"{TOLERANCE:g} on the parameters inside their bounds, {em.cycles} cycles, started at "
        "the runs' sum scores); scale oriented with the sum score (items keyed by the sign of "
        "their rest-score correlation, slopes positive); Wald 95% intervals (SE: Louis, per "
        "item); abilities MAP (N(0, 1) prior) ± 1.96 SE",
        warnings=_fit_warnings(model, items, len(matrix.runs))
        + _trust_warnings(em.converged, abilities),
        notes=_fit_notes(matrix, varies, p),
    )


def _excluded(varies: np.ndarray, p: np.ndarray) -> dict[str, int]:
    """How many items were left out before the fit, by reason."""
    right = int(np.sum(~varies & (p == 1)))
    wrong = int(np.sum(~varies & (p == 0)))
    return {
        "right_by_every_run": right,
        "wrong_by_every_run": wrong,
        "answered_by_fewer_than_2_runs": int(np.sum(~varies)) - right - wrong,
    }


def _fit_notes(matrix: ResponseMatrix, varies: np.ndarray, p: np.ndarray) -> list[str]:
    """The header's account of the item set: the items left out and why, and why the fit's
    accuracies differ from the runs' own."""
    n_all = len(matrix.items)
    ex = _excluded(varies, p)
    right, wrong = ex["right_by_every_run"], ex["wrong_by_every_run"]
    other = ex["answered_by_fewer_than_2_runs"]
    out = []
    if right or wrong or other:
        parts = [f"{right} right by every run", f"{wrong} wrong by every run"]
        if other:
            parts.append(f"{other} answered by fewer than 2 runs")
        out.append(
            f"{int(np.sum(~varies))} of {n_all} items left out ({', '.join(parts)}): they carry no "
            "information on difficulty or ability"
        )
    out.append(
        f"accuracy here is over the {int(varies.sum())} fitted items, so it differs from a run's "
        "own accuracy (over all its items) by the items left out; fit accuracy is the mean "
        "P(right) the model gives at the run's ability, which the N(0, 1) prior pulls toward the "
        "average run, and expected accuracy is the stored P(gold), not fitted"
    )
    return out


def subset_matrix(matrix: ResponseMatrix, items: Sequence[str]) -> ResponseMatrix:
    """The matrix on `items` (IRT item names, or item ids: every variant of the id), in the
    matrix's order; IrtError naming the first unknown one."""
    want = set(items)
    known = set(matrix.items) | {it.partition("/")[0] for it in matrix.items}
    unknown = [i for i in items if i not in known]
    if unknown:
        raise IrtError(
            f"item {unknown[0]!r} is not in suite {matrix.suite}'s runs"
            + (f" ({len(unknown)} unknown in all)" if len(unknown) > 1 else "")
        )
    keep = [k for k, it in enumerate(matrix.items) if it in want or it.partition("/")[0] in want]
    return ResponseMatrix(
        runs=matrix.runs,
        models=matrix.models,
        items=[matrix.items[k] for k in keep],
        correct=matrix.correct[:, keep],
        expected=matrix.expected[:, keep],
        suite=matrix.suite,
    )


def _trust_warnings(converged: bool | None, abilities: Sequence[Ability]) -> list[str]:
    """Whether the abilities can be read at all: a fit stopped at its cycle limit, or abilities
    whose order disagrees with the runs' own accuracy (the trait found is not correctness: with
    few runs and many items, a 2PL can fit a response style instead)."""
    out = []
    if converged is False:
        out.append(
            f"the fit did not converge in {MAX_CYCLES} EM cycles: its parameters and abilities are "
            "not maximum-likelihood estimates; fit a subset (--items, --where) or more runs"
        )
    rho = _accuracy_rho(abilities)
    if rho is not None and not rho >= 0.5:  # (NaN included: abilities or accuracies all equal)
        out.append(
            f"the abilities do not follow the runs' accuracy over the fitted items (Spearman "
            f"rho {rho:.2f}): the trait the fit found is not correctness; do not read them as "
            "abilities (the Rasch fit, --model rasch, weighs every item alike)"
        )
    return out


def _accuracy_rho(abilities: Sequence[Ability]) -> float | None:
    """Spearman correlation of abilities with accuracy (None under 5 runs with an accuracy)."""
    pairs = [(a.theta, a.accuracy) for a in abilities if math.isfinite(a.accuracy)]
    if len(pairs) < 5:
        return None
    from scipy.stats import spearmanr

    return float(spearmanr([t for t, _ in pairs], [acc for _, acc in pairs]).statistic)


def _fit_warnings(model: str, items: Sequence[ItemParams], n_runs: int) -> list[str]:
    """What a reader must know before using the fit's numbers."""
    out = []
    no_ci = sum(1 for i in items if i.discrimination_ci[0] is None and not i.at_bound)
    if len(items) < 3 and model == "2pl":
        out.append(
            f"the fit cannot identify the parameters: {len(items)} items that separate the runs "
            "(a 2PL needs at least 3); its discriminations and difficulties are not estimates"
        )
    elif no_ci:
        out.append(
            f"the fit cannot identify the parameters of {no_ci} item(s): their information is "
            "not positive (no interval); read them as not estimated"
        )
    n_bound = sum(1 for i in items if i.at_bound)
    if n_bound:
        lo, hi = SLOPE_BOUNDS
        out.append(
            f"{n_bound} of {len(items)} items sit at a bound (discrimination {lo:g} or {hi:g}, or "
            f"an extreme difficulty): the runs' answers separate them perfectly, so their "
            "parameters have no finite maximum and no interval"
        )
    return out


# -- selecting runs, fitting stored runs (remembered), reading an item ------------------------------
MIN_RUNS = 10
"""Runs of one suite before the TUI shows IRT unasked (item drill-down, study screen). With fewer
respondents the 2PL's discrimination intervals span most of the scale, so an item's reading
would rest on noise; `llmscope irt` and `Database.irt` fit any 2 or more runs on request."""


def runs_of_suite(
    store: Any, *, suite_id: str | None = None, suite_name: str | None = None
) -> list[dict[str, Any]]:
    """Every stored run of a suite (by id, or by name), oldest first (ties by run id), so the
    TUI, `llmscope irt --suite` and the notebook fit the same runs in the same order."""
    if (suite_id is None) == (suite_name is None):
        raise IrtError("give a suite id or a suite name (one of them)")
    col = "suite_id" if suite_id is not None else "suite_name"
    rows = store.execute(
        f"SELECT run_id FROM runs WHERE {col} = ? ORDER BY started_at, run_id",
        [suite_id if suite_id is not None else suite_name],
    ).fetchall()
    return [r for r in (store.get_run(str(x[0])) for x in rows) if r is not None]


_CACHE: dict[tuple[Any, ...], IrtFit] = {}
_CACHE_SIZE = 16
_CACHE_LOCK = threading.Lock()


def _cache_key(store: Any, runs: Sequence[Mapping[str, Any]], model: str) -> tuple[Any, ...]:
    """The file, the model, and each run with its rows fingerprint (the metrics cache's: it
    changes whenever a row is added, replaced or deleted)."""
    from llmscope.store.run_queries import ROWS_FINGERPRINT_SQL

    ids = [str(r["run_id"]) for r in runs]
    marks = ",".join("?" for _ in ids)
    fps = dict(
        store.execute(
            f"SELECT x.run_id, {ROWS_FINGERPRINT_SQL} FROM results x "
            f"WHERE x.run_id IN ({marks}) GROUP BY x.run_id",
            ids,
        ).fetchall()
    )
    return (str(getattr(store, "path", "")), model, tuple((i, fps.get(i)) for i in ids))


def fit_stored(
    store: Any,
    runs: Sequence[Mapping[str, Any]],
    model: str = "2pl",
    items: Sequence[str] | None = None,
) -> IrtFit:
    """`fit_irt(response_matrix(store, runs), model)`, remembered in this process per (file,
    runs and their rows fingerprints, model): a screen that asks again after a step or a
    refresh gets the same fit without refitting, and a run that gained rows is refitted."""
    key = (*_cache_key(store, runs, model), tuple(items or ())) if runs else None
    with _CACHE_LOCK:
        hit = _CACHE.get(key) if key is not None else None
    if hit is not None:
        return hit
    matrix = response_matrix(store, runs)
    fit = fit_irt(matrix if items is None else subset_matrix(matrix, items), model)
    if key is not None:
        with _CACHE_LOCK:
            _CACHE[key] = fit
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.pop(next(iter(_CACHE)))
    return fit


# Verbal labels for discrimination: Baker (2001), "The Basics of Item Response Theory", 2nd ed.,
# Table 2-1 (logistic metric, as mirt's a): lower bound of each label.
DISCRIMINATION_LABELS = (
    (1.70, "very high"),
    (1.35, "high"),
    (0.65, "moderate"),
    (0.35, "low"),
    (0.01, "very low"),
)
DOES_NOT_DISCRIMINATE = 0.35
"""Below this discrimination (Baker's "very low" or none) an item is read "does not
discriminate": stronger and weaker runs get it right about alike."""
# Difficulty on the ability scale (standard deviations of the runs' abilities): upper bound of
# each label.
DIFFICULTY_LABELS = ((-2.0, "very easy"), (-0.5, "easy"), (0.5, "medium"), (2.0, "hard"))


@dataclass(frozen=True)
class ItemReading:
    """An item's parameters in plain words (`read_item`)."""

    difficulty: str  # very easy .. very hard
    discrimination: str  # very high .. very low, none, negative
    p_average: float  # P(right) for a run of average ability (theta = 0)
    text: str


def read_item(item: ItemParams) -> ItemReading:
    """The plain-words reading of an item: how hard it is for a run of average ability, how
    well it separates stronger from weaker runs, and whether it looks like a label error."""
    a, b = item.discrimination, item.difficulty
    p0 = 1.0 / (1.0 + math.exp(a * b))  # P(right | theta = 0) = logistic(a * (0 - b))
    # a difficulty is where P(right) crosses 1/2 on the way up; an item that falls as ability
    # rises has no "hard" or "easy" in that sense, so only its P(right | theta = 0) is read
    diff = (
        next((name for hi, name in DIFFICULTY_LABELS if b < hi), "very hard")
        if a > 0
        else "not read (negative discrimination)"
    )
    if a < 0:
        disc = "negative"
        if item.flagged:
            how = "discriminates negatively: likely label error, check the gold"
        else:
            how = (
                "discriminates negatively, but its interval reaches 0: possibly a label error, "
                "check the gold"
            )
        how += " (stronger runs get it wrong more often than weaker ones)"
    elif a < DOES_NOT_DISCRIMINATE:
        disc = next((name for lo, name in DISCRIMINATION_LABELS if a >= lo), "none")
        how = "does not discriminate: stronger and weaker runs get it right about alike"
    else:
        disc = next(name for lo, name in DISCRIMINATION_LABELS if a >= lo)
        how = f"discriminates ({disc})"
        if item.discrimination_ci[0] is not None and item.discrimination_ci[0] <= 0:
            how += ", though its interval reaches 0"
    if item.at_bound:
        how += "; at a bound of the fit (the runs separate it perfectly): no finite estimate"
    chance = f"a run of average ability is right with probability {p0:.2f}"
    if a < DOES_NOT_DISCRIMINATE:
        # the finding leads; the difficulty of such an item is not a property worth reading
        text = f"{how}; {chance}"
    else:
        text = f"{diff}: {chance}; {how}"
    return ItemReading(difficulty=diff, discrimination=disc, p_average=p0, text=text)


# -- tables (the notebook's DataFrames and `llmscope irt --format csv`) -----------------------------
def items_frame(fits: Sequence[IrtFit]) -> pd.DataFrame:
    """One row per (fit, item): parameters, 95% interval bounds, the checks and the reading."""
    rows = []
    for f in fits:
        for i in f.items:
            r = read_item(i)
            rows.append(
                {
                    "irt_model": f.model,
                    "suite": f.suite,
                    "item": i.item,
                    "item_id": i.item_id,
                    "variant": i.variant,
                    "difficulty": i.difficulty,
                    "difficulty_lo": i.difficulty_ci[0],
                    "difficulty_hi": i.difficulty_ci[1],
                    "discrimination": i.discrimination,
                    "discrimination_lo": i.discrimination_ci[0],
                    "discrimination_hi": i.discrimination_ci[1],
                    "n": i.n,
                    "p_correct": i.p_correct,
                    "expected_accuracy": i.expected_accuracy,
                    "rest_correlation": i.rest_correlation,
                    "reversed": i.reversed,
                    "flagged": i.flagged,
                    "at_bound": i.at_bound,
                    "difficulty_label": r.difficulty,
                    "discrimination_label": r.discrimination,
                    "p_average": r.p_average,
                    "reading": r.text,
                }
            )
    return _typed(pd.DataFrame(rows, columns=ITEM_COLUMNS))


def abilities_frame(fits: Sequence[IrtFit]) -> pd.DataFrame:
    """One row per (fit, run): ability (MAP), its 95% interval and standard error, accuracy."""
    rows = [
        {
            "irt_model": f.model,
            "suite": f.suite,
            "run_id": a.run_id,
            "model": a.model,
            "theta": a.theta,
            "theta_lo": a.ci[0],
            "theta_hi": a.ci[1],
            "se": a.se,
            "n": a.n,
            "accuracy": a.accuracy,
            "fit_accuracy": a.fit_accuracy,
            "expected_accuracy": a.expected_accuracy,
        }
        for f in fits
        for a in f.abilities
    ]
    return _typed(pd.DataFrame(rows, columns=ABILITY_COLUMNS))


ITEM_COLUMNS = [
    "irt_model", "suite", "item", "item_id", "variant", "difficulty", "difficulty_lo",
    "difficulty_hi", "discrimination", "discrimination_lo", "discrimination_hi", "n",
    "p_correct", "expected_accuracy", "rest_correlation", "reversed", "flagged", "at_bound",
    "difficulty_label", "discrimination_label", "p_average", "reading",
]  # fmt: skip
ABILITY_COLUMNS = [
    "irt_model", "suite", "run_id", "model", "theta", "theta_lo", "theta_hi", "se", "n",
    "accuracy", "fit_accuracy", "expected_accuracy",
]  # fmt: skip
TEXT_COLUMNS = {"irt_model", "suite", "item", "item_id", "variant", "run_id", "model",
         "difficulty_label", "discrimination_label", "reading"}  # fmt: skip


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """Numbers as float64 (missing: NaN), counts int64, flags bool, the rest text."""
    for c in df.columns:
        if c in TEXT_COLUMNS:
            df[c] = df[c].astype(object)
        elif c == "n":
            df[c] = df[c].astype("int64")
        elif c in ("reversed", "flagged", "at_bound"):
            df[c] = df[c].astype(bool)
        else:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    return df
