"""Multiple-comparison corrections for several p-values reported together.

Holm's step-down method (Holm 1979, "A simple sequentially rejective multiple test procedure",
Scand. J. Statist. 6:65-70) controls the family-wise error rate under any dependence between
the tests, which suits paired comparisons that share runs. With the m p-values sorted
ascending, p_(1) <= ... <= p_(m), the adjusted values are

    p~_(i) = min(1, max_{j <= i} (m - j + 1) * p_(j))

and each is returned in its original position. Written out here (a few lines) rather than
taken from statsmodels' `multipletests`, which is not a dependency of llmscope; the tests
check it against values worked out by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["HOLM", "holm"]

HOLM = "Holm (family-wise error rate, step-down)"


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values, in the input's order; a missing (None or NaN) p-value stays
    None and does not count in the family size m."""
    present = [
        (i, float(p))
        for i, p in enumerate(pvalues)
        if p is not None and not (isinstance(p, float) and math.isnan(p))
    ]
    m = len(present)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (i, p) in enumerate(sorted(present, key=lambda t: t[1])):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out
