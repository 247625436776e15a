"""A response cache shared across runs: the same question to the same model is asked once.

Keyed by (model identity, call, request parameters): the model identity is everything the
backend reports in `describe()` except fields that cannot change an answer (batch size,
threads, concurrency, retry policy, counters); the call is `next_token`, `loglik` or
`generate` with every argument (prompt, answers, chat flag, top-k, generation parameters).
Values are the backend's typed outputs, stored as JSON. Only reproducible answers are stored:
sampled generations and sampled answer estimates without a seed are always recomputed.

The cache is one SQLite file (WAL mode, so several runs in several processes can share it):
`$LLMSCOPE_RESPONSE_CACHE` if set (a path, or `off`), else `<cache dir>/responses.sqlite`
with the cache dir of `engine.models.cache_dir()`. Hits and misses are counted in the run's
backend stats (`cache_hits`, `cache_misses`). `llmscope run --no-cache` bypasses it.

SQLite rather than DuckDB: DuckDB lets one process write a file at a time, and a cache is
exactly the file several concurrent runs must write.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from llmscope.engine.backend import Backend, Capabilities, GenParams
from llmscope.engine.types import GenerateOut, LogLikOut, NextTokenOut, TopToken

CACHE_FORMAT = 1  # bump when the stored shape or the meaning of a cached call changes

# describe() fields that cannot change an answer; everything else is part of the identity.
VOLATILE_FIELDS = frozenset({
    "batch_size", "threads", "torch_threads", "concurrency", "max_retries", "timeout", "api_key",
    "client", "served_models", "system_fingerprints", "load", "reasoning_efforts_rejected",
    "dropped_params", "notices", "stats", "capabilities_probed_at",
    "scoring",  # hf: tree-mask or padded log-likelihood path (equal within fp32 rounding)
})

COMMIT_EVERY_S = 1.0


def cache_path() -> Path | None:
    """Where the shared cache lives, or None when `$LLMSCOPE_RESPONSE_CACHE` is `off`."""
    env = os.environ.get("LLMSCOPE_RESPONSE_CACHE")
    if env:
        return None if env.strip().lower() in ("off", "0", "no", "false") else Path(env).expanduser()
    from llmscope.engine.models import cache_dir

    return cache_dir() / "responses.sqlite"


class ResponseCache:
    """The SQLite table of cached responses; safe to share between threads and processes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._con = sqlite3.connect(str(self.path), timeout=10.0, check_same_thread=False,
                                    isolation_level=None)
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute("PRAGMA busy_timeout=10000")
        self._con.execute(
            "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL)"
        )
        self._pending: list[tuple[str, str, float]] = []
        self._last_commit = time.monotonic()

    def get(self, key: str) -> Any | None:
        with self._lock:
            for k, v, _ in self._pending:
                if k == key:
                    return json.loads(v)
            row = self._con.execute("SELECT value FROM responses WHERE key = ?", [key]).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, value: Any) -> None:
        text = json.dumps(value, allow_nan=True)
        with self._lock:
            self._pending.append((key, text, time.time()))
            if time.monotonic() - self._last_commit >= COMMIT_EVERY_S or len(self._pending) >= 512:
                self._flush_locked()

    def _flush_locked(self) -> None:
        if self._pending:
            try:
                self._con.execute("BEGIN IMMEDIATE")
                self._con.executemany("INSERT OR IGNORE INTO responses VALUES (?, ?, ?)", self._pending)
                self._con.execute("COMMIT")
            except sqlite3.Error:
                # A busy or full cache must never fail a run: the answers are in the results.
                try:
                    self._con.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            self._pending = []
        self._last_commit = time.monotonic()

    def close(self) -> None:
        with self._lock:
            self._flush_locked()
            self._con.close()


def model_identity(describe: dict[str, Any]) -> dict[str, Any]:
    """The part of a backend's description that can change its answers."""
    return {k: v for k, v in describe.items() if k not in VOLATILE_FIELDS}


def _key(identity: dict[str, Any], call: str, args: Any) -> str:
    blob = json.dumps([CACHE_FORMAT, identity, call, args], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class CachedBackend(Backend):
    """Wraps a backend: answers a repeated call from the cache, otherwise asks and stores."""

    def __init__(self, inner: Backend, cache: ResponseCache) -> None:
        self.inner = inner
        self.cache = cache
        self.kind = inner.kind
        self.hits = 0
        self.misses = 0
        self._identity: dict[str, Any] | None = None

    def __getattr__(self, name: str) -> Any:
        # Optional backend features (probe, choice_by_labels, ...) pass through unchanged.
        return getattr(self.inner, name)

    def _ident(self) -> dict[str, Any]:
        # Taken at the first call, after any capability probe has settled the backend's method.
        if self._identity is None:
            self._identity = model_identity(self.inner.describe())
        return self._identity

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    @property  # type: ignore[override]
    def tok(self) -> Any:
        return self.inner.tok

    @property  # type: ignore[override]
    def add_bos(self) -> bool:
        return self.inner.add_bos

    async def probe(self, task: Any = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
        await self.inner.probe(task, options)
        return self.describe()

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "response_cache": str(self.cache.path)}

    def stats(self) -> dict[str, Any]:
        return {**self.inner.stats(), "cache_hits": self.hits, "cache_misses": self.misses}

    def render(self, prompt: str, *, chat: bool = True) -> str:
        return self.inner.render(prompt, chat=chat)

    async def next_token(
        self, prompt: str, answers: list[str], *, chat: bool = True, top_k: int = 20
    ) -> NextTokenOut:
        key = _key(self._ident(), "next_token", [prompt, list(answers), chat, top_k])
        hit = self.cache.get(key)
        if hit is not None:
            self.hits += 1
            hit["top"] = [TopToken(**t) for t in hit["top"]]
            out = NextTokenOut(**hit)
            out.meta = {**out.meta, "cache": "hit"}
            return out
        self.misses += 1
        out = await self.inner.next_token(prompt, answers, chat=chat, top_k=top_k)
        sampled = out.meta.get("method") == "sampled-estimate"
        if not sampled or out.meta.get("seed") is not None:
            self.cache.put(key, dataclasses.asdict(out))
        return out

    async def loglik(self, requests: list[tuple[str, str]], *, chat: bool = False) -> list[LogLikOut]:
        key = _key(self._ident(), "loglik", [[list(r) for r in requests], chat])
        hit = self.cache.get(key)
        if hit is not None:
            self.hits += 1
            return [LogLikOut(**o) for o in hit]
        self.misses += 1
        outs = await self.inner.loglik(requests, chat=chat)
        self.cache.put(key, [dataclasses.asdict(o) for o in outs])
        return outs

    async def generate(self, prompt: str, params: GenParams, *, chat: bool = True) -> GenerateOut:
        reproducible = params.temperature == 0 or params.seed is not None
        key = _key(self._ident(), "generate", [prompt, dataclasses.asdict(params), chat])
        if reproducible:
            hit = self.cache.get(key)
            if hit is not None:
                self.hits += 1
                out = GenerateOut(**hit)
                out.meta = {**out.meta, "cache": "hit"}
                return out
        self.misses += 1
        out = await self.inner.generate(prompt, params, chat=chat)
        if reproducible:
            self.cache.put(key, dataclasses.asdict(out))
        return out

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            self.cache.close()


def with_cache(backend: Backend, enabled: bool = True, warn: Any = None) -> Backend:
    """`backend` wrapped in the shared response cache, unless disabled (flag or environment).

    An unusable cache location costs speed, never the run: `warn(message)` is told why.
    """
    if not enabled:
        return backend
    path = cache_path()
    if path is None:
        return backend
    try:
        cache = ResponseCache(path)
    except (OSError, sqlite3.Error) as e:
        if warn is not None:
            warn(f"response cache disabled: cannot open {path}: {e}")
        return backend
    return CachedBackend(backend, cache)
