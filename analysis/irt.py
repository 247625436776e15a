"""Item response theory across runs of one suite: Rasch (1PL) and 2PL fits of the runs x items
matrix of per-item correctness, item difficulty and discrimination, each run's ability, with
intervals; items that discriminate negatively are flagged as likely label errors.

The fits are made by the `mirt` package (marginal maximum likelihood by EM, standard errors from
the observed information by Oakes' identity, Wald intervals; abilities are MAP scores under the
N(0, 1) prior with their standard error from the posterior's curvature). MAP, not mirt's default
EAP: EAP integrates over 21 quadrature points, and once a run answers a few hundred items its
posterior is narrower than that grid, so its EAP lands on grid points and its posterior SD
collapses (simulated 35 runs x 1,000 items: 30 distinct EAPs for 35 runs, median SD 0.009 against
the 0.066 of the information; with 24 items the two agree within 0.01). Why mirt: on simulated data with known parameters
(`bench/irt_libraries.py`, `tests/analysis/test_irt.py`) it recovers difficulties,
discriminations and abilities as closely as girth (the other numpy/scipy candidate; the same
estimates to two decimals), it is maintained, and it gives standard errors and intervals, which
girth leaves to a bootstrap; py-irt requires pandas < 3. girth's 2PL also took 26 s on 40 x 200
where mirt took 0.5 s.

What an IRT item is here: one stored (item, prompt variant) pair, named `item_id` when the suite
has one variant and `item_id/variant` otherwise: each prompt variant or option order is a question
of its own. A response is the row's `correct` (an abstention counts 0, as in `accuracy`); error
rows and rows without gold are missing. Items every run answers alike (all right or all wrong)
carry no information about difficulty and are left out of the fit, listed in `constant_items`.

Negative discrimination: mirt (like girth) bounds every discrimination below by a small positive
number (0.1), so an item whose responses fall as ability rises cannot be fitted as it is. Such an
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
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

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
    method: str = ""

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
    out = np.full(x.shape[1], np.nan)
    answered = ~np.isnan(x)
    right = np.nan_to_num(x)
    for j in range(x.shape[1]):
        n_rest = answered.sum(axis=1) - answered[:, j]
        rest = (right.sum(axis=1) - right[:, j]) / np.where(n_rest > 0, n_rest, np.nan)
        keep = answered[:, j] & ~np.isnan(rest)
        a, b = x[keep, j], rest[keep]
        if keep.sum() >= 3 and a.std() > 0 and b.std() > 0:
            out[j] = float(np.corrcoef(a, b)[0, 1])
    return out


def _ci(lo: Any, hi: Any) -> tuple[float | None, float | None]:
    lo_f, hi_f = float(lo), float(hi)
    if not (math.isfinite(lo_f) and math.isfinite(hi_f)):
        return (None, None)
    return (lo_f, hi_f)


# Peak memory of mirt's 2PL fit with Oakes standard errors, per squared item count: measured
# 0.51 GB at 1,000 items and 1.6 GB at 2,000 (35 runs); it grows with the square of the items
# (the information matrix of 2 parameters per item and its temporaries).
_BYTES_PER_ITEM_SQUARED = 520.0


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _check_memory(n_items: int) -> None:
    """Refuse a fit that would not fit in memory, before mirt starts (past it, the process is
    killed by the system without a word)."""
    need = _BYTES_PER_ITEM_SQUARED * n_items**2
    avail = _available_memory()
    if avail is not None and need > 0.8 * avail:
        raise IrtError(
            f"an IRT fit of {n_items:,} items needs about {need / 2**30:.1f} GB (its standard errors' "
            f"information matrix grows with the square of the items) and {avail / 2**30:.1f} GB is "
            f"available: fit fewer items, e.g. the runs of a suite built from part of the items"
        )


def fit_irt(matrix: ResponseMatrix, model: str = "2pl") -> IrtFit:
    """Fit `model` ("rasch" or "2pl") to the matrix with mirt."""
    import mirt

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
    _check_memory(len(cols))
    xs = x[:, cols]
    rest = _rest_correlation(xs)
    rev = (rest < 0) if model == "2pl" else np.zeros(len(cols), dtype=bool)
    fit_x = np.where(rev[None, :] & ~np.isnan(xs), 1.0 - xs, xs)
    names = [f"i{k}" for k in range(len(cols))]
    frame = pd.DataFrame(fit_x, columns=names)
    with warnings.catch_warnings():
        # mirt warns on small samples and boundary estimates; both are shown in the intervals
        warnings.simplefilter("ignore")
        if model == "2pl":
            res = mirt.fit_mirt(frame, model="2PL")
        else:  # one discrimination common to all items (see the module's docstring)
            res = mirt.fit_mirt(
                frame,
                model="2PL",
                spec=f"F = i0-i{len(cols) - 1}\nCONSTRAIN = (i0-i{len(cols) - 1}, a1)",
            )
        coef = res.coef()
        ci = res.confidence_intervals()
        scores = mirt.fscores(res, frame, method="MAP")
    theta = np.asarray(scores.theta, dtype=float).ravel()
    se = np.asarray(scores.standard_error, dtype=float).ravel()
    disc = coef["discrimination"].to_numpy(dtype=float)
    diff = coef["difficulty"].to_numpy(dtype=float)
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
            )
        )
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
            )
        )
    return IrtFit(
        model=model,
        suite=matrix.suite,
        items=items,
        abilities=abilities,
        constant_items=constant,
        log_likelihood=float(res.log_likelihood),
        converged=bool(res.converged),
        method=f"mirt {mirt.__version__} MML-EM; Wald 95% intervals (SE: {res.se_method}); "
        "abilities MAP (N(0, 1) prior) ± 1.96 SE",
    )


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


def fit_stored(store: Any, runs: Sequence[Mapping[str, Any]], model: str = "2pl") -> IrtFit:
    """`fit_irt(response_matrix(store, runs), model)`, remembered in this process per (file,
    runs and their rows fingerprints, model): a screen that asks again after a step or a
    refresh gets the same fit without refitting, and a run that gained rows is refitted."""
    key = _cache_key(store, runs, model) if runs else None
    with _CACHE_LOCK:
        hit = _CACHE.get(key) if key is not None else None
    if hit is not None:
        return hit
    fit = fit_irt(response_matrix(store, runs), model)
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
            "expected_accuracy": a.expected_accuracy,
        }
        for f in fits
        for a in f.abilities
    ]
    return _typed(pd.DataFrame(rows, columns=ABILITY_COLUMNS))


ITEM_COLUMNS = [
    "irt_model", "suite", "item", "item_id", "variant", "difficulty", "difficulty_lo",
    "difficulty_hi", "discrimination", "discrimination_lo", "discrimination_hi", "n",
    "p_correct", "expected_accuracy", "rest_correlation", "reversed", "flagged",
    "difficulty_label", "discrimination_label", "p_average", "reading",
]  # fmt: skip
ABILITY_COLUMNS = [
    "irt_model", "suite", "run_id", "model", "theta", "theta_lo", "theta_hi", "se", "n",
    "accuracy", "expected_accuracy",
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
        elif c in ("reversed", "flagged"):
            df[c] = df[c].astype(bool)
        else:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    return df
