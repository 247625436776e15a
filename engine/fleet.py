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

A replica is picked when one of its request slots is free (`pick(free)`), never before:
a request waits for the first free slot of any replica in the rotation, so a replica that
hangs holds only the requests already on its slots, not a queue behind them.

A fleet measures one model. A replica that serves another model (or fingerprint) than the
run's is left out for good (`exclude`): at the start (event `left_out`) or when it changes
mid-run (event `model_changed`); it never rejoins, and no answer from it after the change is
used. Failures that count towards the cool-off are the ones the backend reports through
`failed`: no answer, a timeout, and 200 answers whose bodies cannot be right (an error body,
impossible probabilities).

Only when every replica is out does a failure count towards the backend's circuit breaker
(the run pauses, as with one URL). With one URL nothing changes: the lone replica is always
picked, whatever its state (unless it changed model: then nothing is left to ask).
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
    failures: int = 0  # connection failures, timeouts and impossible bodies, whole run
    downs: int = 0
    trials: int = 0  # attempts sent to it after a cool-off, to see whether it is back
    excluded: str | None = None  # why it is out for good (another model), else None
    models: set[str] = field(default_factory=set)  # served model ids seen in its answers
    fingerprints: set[str] = field(default_factory=set)


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

    def pick(self, free: Callable[[int], bool] | None = None) -> int | None:
        """The replica for the next attempt among those with a free slot (`free(i)`; all when
        None): the next one up in round-robin order; a replica whose cool-off is over gets its
        trial first; with every replica out, the one whose cool-off ends first (the attempt
        then tells whether it is back). None: no usable replica has a free slot now."""
        n = len(self.replicas)
        ok = [
            free is None or free(i) if r.excluded is None else False
            for i, r in enumerate(self.replicas)
        ]
        if n == 1:
            return 0 if ok[0] else None
        now = self.clock()
        for i, r in enumerate(self.replicas):
            if ok[i] and not r.up and not r.trial and now >= r.retry_at:
                r.trial, r.trials = True, r.trials + 1
                return i
        for k in range(n):
            i = (self._rr + k) % n
            if ok[i] and self.replicas[i].up:
                self._rr = i + 1
                return i
        if any(r.up for r, o in zip(self.replicas, ok, strict=True) if r.excluded is None):
            return None  # a replica in the rotation will free a slot: wait for it
        down = [i for i in range(n) if ok[i]]
        return min(down, key=lambda i: self.replicas[i].retry_at) if down else None

    def next_trial_in(self) -> float | None:
        """Seconds until a replica out of the rotation is due for its trial (None: none is)."""
        due = [r.retry_at for r in self.replicas if not r.up and not r.trial and r.excluded is None]
        return max(0.0, min(due) - self.clock()) if due else None

    def usable(self) -> int:
        """How many replicas serve the run's model (in the rotation or cooling off)."""
        return sum(r.excluded is None for r in self.replicas)

    def exclude(self, i: int, kind: str, reason: str) -> None:
        """Take replica `i` out for good (it serves another model); event `kind`."""
        r = self.replicas[i]
        if r.excluded is not None:
            return
        r.excluded, r.up, r.trial = reason, False, False
        self._event(kind, i, reason)

    def healthy(self) -> int:
        """How many replicas are in the rotation."""
        return sum(r.up for r in self.replicas)

    def answered(self, i: int) -> None:
        """Replica `i` answered over HTTP (any status): it is up."""
        r = self.replicas[i]
        r.trial = False
        if not r.up and r.excluded is None:
            r.up, r.cool_off = True, COOL_OFF_S
            self._event("back", i, "answered again")

    def failed(self, i: int, reason: str) -> bool:
        """Replica `i` did not answer (connection error or timeout). Returns True when
        another replica is still up, so the attempt can be retried there at once."""
        r = self.replicas[i]
        r.failures += 1
        if len(self.replicas) == 1 or r.excluded is not None:
            return self.healthy() > 0 and len(self.replicas) > 1
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
            "endpoints_excluded": [r.excluded for r in self.replicas],
            "endpoint_failures": [r.failures for r in self.replicas],
            "endpoint_trials": [r.trials for r in self.replicas],
            "endpoint_events": list(self.events),
            "endpoint_events_dropped": self._dropped_events,
        }
