"""Several base URLs serving one model: which replica gets the next attempt.

A run given several `--base-url`s spreads its requests over them round-robin. A replica
that stops answering (connection refused or reset, a timeout) is taken out of the rotation
for a cool-off (`COOL_OFF_S`, doubling on each failed trial up to `COOL_OFF_MAX_S`); the
other replicas carry the run, and the request that failed is retried on one of them at once.
When its cool-off ends the replica gets one trial attempt: an answer puts it back, a failure
sends it out again. Every change is an event (`down` / `back`, with the time, the replica and
the reason) recorded in the backend's stats, which the runner stores with each session
(`runs.meta.backend_stats.endpoint_events`), so the run record says which replica was lost
and when it returned.

Only when every replica is out does a failure count towards the backend's circuit breaker
(the run pauses, as with one URL). With one URL nothing changes: the lone replica is always
picked, whatever its state.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

COOL_OFF_S = 2.0
COOL_OFF_MAX_S = 30.0
MAX_EVENTS = 200  # a flapping replica must not grow the run record without bound


@dataclass
class Replica:
    """The health of one base URL."""

    url: str  # as shown (credentials already refused by the backend)
    up: bool = True
    retry_at: float = 0.0  # monotonic time of the next trial while down
    cool_off: float = COOL_OFF_S
    trial: bool = False  # one attempt in flight after the cool-off
    failures: int = 0  # connection failures and timeouts, whole run
    downs: int = 0


@dataclass
class Fleet:
    """Round-robin over replicas, skipping the ones that stopped answering (module docstring)."""

    urls: list[str]
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    replicas: list[Replica] = field(init=False)
    events: list[dict[str, Any]] = field(default_factory=list)
    _rr: int = 0
    _dropped_events: int = 0

    def __post_init__(self) -> None:
        self.replicas = [Replica(u) for u in self.urls]

    def pick(self) -> int:
        """The replica for the next attempt: the next one up in round-robin order; a replica
        whose cool-off is over gets its trial first; with every replica out, the one whose
        cool-off ends first (the attempt then tells whether it is back)."""
        n = len(self.replicas)
        if n == 1:
            return 0
        now = self.clock()
        for i, r in enumerate(self.replicas):
            if not r.up and not r.trial and now >= r.retry_at:
                r.trial = True
                return i
        for k in range(n):
            i = (self._rr + k) % n
            if self.replicas[i].up:
                self._rr = i + 1
                return i
        return min(range(n), key=lambda i: self.replicas[i].retry_at)

    def healthy(self) -> int:
        """How many replicas are in the rotation."""
        return sum(r.up for r in self.replicas)

    def answered(self, i: int) -> None:
        """Replica `i` answered over HTTP (any status): it is up."""
        r = self.replicas[i]
        r.trial = False
        if not r.up:
            r.up, r.cool_off = True, COOL_OFF_S
            self._event("back", i, "answered again")

    def failed(self, i: int, reason: str) -> bool:
        """Replica `i` did not answer (connection error or timeout). Returns True when
        another replica is still up, so the attempt can be retried there at once."""
        r = self.replicas[i]
        r.failures += 1
        if len(self.replicas) == 1:
            return False
        now = self.clock()
        if r.up:
            r.up, r.downs = False, r.downs + 1
            r.retry_at = now + r.cool_off
            self._event("down", i, reason)
        elif r.trial:
            r.cool_off = min(COOL_OFF_MAX_S, r.cool_off * 2)
            r.retry_at = now + r.cool_off
        r.trial = False
        return self.healthy() > 0

    def _event(self, kind: str, i: int, reason: str) -> None:
        if len(self.events) >= MAX_EVENTS:
            self._dropped_events += 1
            return
        self.events.append(
            {
                "event": kind,
                "endpoint": i,
                "url": self.replicas[i].url,
                "at": round(self.wall(), 3),
                "reason": reason[:300],
            }
        )

    def summary(self) -> dict[str, Any]:
        """What the run record keeps: each replica's state and the down/back events."""
        return {
            "endpoints_up": [r.up for r in self.replicas],
            "endpoint_failures": [r.failures for r in self.replicas],
            "endpoint_events": list(self.events),
            "endpoint_events_dropped": self._dropped_events,
        }
