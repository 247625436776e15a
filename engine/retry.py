"""Retry timing for HTTP backends: exponential backoff with full jitter and `Retry-After`.

Pure functions (no I/O) so the timing rules can be tested without a server.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass


def parse_retry_after(
    headers: Mapping[str, str] | None, *, now: float | None = None
) -> float | None:
    """Seconds to wait according to `retry-after-ms` or `Retry-After` (seconds or HTTP date).

    `retry-after-ms` wins when both are present (it is the more precise one).
    Returns None when neither header is present or parseable; never negative.
    """
    if not headers:
        return None
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    ms = lower.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms.strip()) / 1000.0)
        except ValueError:
            pass
    ra = lower.get("retry-after")
    if ra is None:
        return None
    ra = ra.strip()
    try:
        return max(0.0, float(ra))
    except ValueError:
        pass
    try:
        dt = email.utils.parsedate_to_datetime(ra)
    except (TypeError, ValueError, IndexError):
        return None
    if dt is None:
        return None
    now = time.time() if now is None else now
    return max(0.0, dt.timestamp() - now)


@dataclass
class RetryPolicy:
    """How long to wait before retry number `attempt` (0-based)."""

    max_retries: int = 6
    base: float = 0.5  # first backoff window, seconds
    cap: float = 30.0  # largest backoff window, seconds
    max_retry_after: float = 300.0  # a server asking for longer than this is capped

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Full jitter (uniform in [0, min(cap, base*2^attempt)]), or at least `Retry-After`.

        When the server says how long to wait we wait that long plus a little jitter
        (up to 10%) so that many clients told the same time do not return together.
        """
        if retry_after is not None:
            ra = min(retry_after, self.max_retry_after)
            return ra + rng.uniform(0.0, 0.1 * ra)
        window = min(self.cap, self.base * (2.0**attempt))
        return rng.uniform(0.0, window)
