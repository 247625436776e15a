"""Numbers as every surface prints them (TUI, text report, compare, study grid): one place.

The rules are the ones papers print by:

- counts (``n``, ``n_tokens``, ``n_chars``, ``errors``, ...) as integers: ``2``, never ``2.0000``;
- every other value with three decimals: shares and probabilities (accuracy, rates, ECE, MCE,
  Brier, p(option)) ``0.432``, log-likelihoods and scores ``-14.848``; a value below 0.001 that
  is not a share with three significant digits (``0.000134``, ``1.2e-05``), so it never reads
  as zero;
- an interval after its estimate, its bounds in the estimate's format: ``0.432 [0.385, 0.479]``;
- no value (None, NaN): ``-``.

Stored values and JSON exports keep full precision; only what is shown is rounded.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["fmt_count", "fmt_interval", "fmt_num", "is_count", "is_share"]

# metric (or field) names whose values are counts
_COUNTS = {
    "n",
    "k",
    "count",
    "n_items",
    "n_runs",
    "n_clusters",
    "n_tokens",
    "n_chars",
    "n_bytes",
    "n_context_tokens",
    "n_scored",
    "n_errors",
    "n_pairs",
    "tokens",
    "sample_len",
    "rows",
    "errors",
    "left_out_no_distribution",
    "is_greedy",
    "uncond_is_greedy",
}
# names whose values are shares or probabilities in [0, 1]
_SHARES = {
    "accuracy",
    "acc",
    "ece",
    "mce",
    "brier",
    "prob",
    "probability",
    "p",
    "confidence",
    "agreement",
    "share",
    "calibrated",
    "correct",
    "rate",
    "consensus",
    "awareness",
}


def is_count(metric: str | None) -> bool:
    """Whether values of `metric` are counts (printed as integers)."""
    if not metric:
        return False
    m = metric.lower()
    return m in _COUNTS or m.startswith("n_") or m.endswith("_count")


def is_share(metric: str | None) -> bool:
    """Whether values of `metric` are shares or probabilities (printed with three decimals)."""
    if not metric:
        return False
    words = metric.lower().replace("-", "_").split("_")
    return bool(_SHARES & set(words)) or any(
        w.startswith("accurac") or w.endswith("rate") for w in words
    )


def _float(x: Any) -> float | None:
    if x is None or isinstance(x, str):
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def fmt_count(n: Any) -> str:
    """A count as an integer ("-" when there is none)."""
    f = _float(n)
    return "-" if f is None else (str(int(round(f))) if math.isfinite(f) else str(f))


def fmt_num(x: Any, metric: str | None = None, *, decimals: int | None = None) -> str:
    """One value as every surface prints it (rules in the module docstring).

    `metric` chooses the rule (a count, a share, or any other value); `decimals` fixes the
    number of decimals instead (a table whose column shares one scale). Text is returned as it is.
    """
    if isinstance(x, str):
        return x
    if isinstance(x, bool):
        return "yes" if x else "no"
    f = _float(x)
    if f is None:
        return "-" if x is None or isinstance(x, (float, int)) else str(x)
    if not math.isfinite(f):
        return "inf" if f > 0 else "-inf"
    if is_count(metric) or (isinstance(x, int) and not is_share(metric)):
        return fmt_count(f)
    if decimals is None and f != 0 and abs(f) < 1e-3 and not is_share(metric):
        return f"{f:.3g}"
    return f"{f:.{3 if decimals is None else decimals}f}"


def fmt_interval(value: Any, lo: Any, hi: Any, metric: str | None = None) -> str:
    """``0.432 [0.385, 0.479]``: the estimate, then its interval in the same format; the
    estimate alone when there is no interval."""
    v = fmt_num(value, metric)
    if _float(lo) is None or _float(hi) is None:
        return v
    return f"{v} [{fmt_num(lo, metric)}, {fmt_num(hi, metric)}]"
