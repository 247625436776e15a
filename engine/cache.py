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

A damaged cache costs speed, never the run: a file that is not SQLite, holds another schema or
turns out malformed (at open, or on any read or write) is moved aside whole, as
`responses.sqlite.damaged-<time>`, a new one is started, and one warning names both files;
the call that met the damage is asked of the backend, as a miss is (`set_aside`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
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
VOLATILE_FIELDS = frozenset(
    {
        "batch_size",
        "threads",
        "torch_threads",
        "concurrency",
        "max_retries",
        "timeout",
        "api_key",
        "client",
        "served_models",
        "system_fingerprints",
        "load",
        "reasoning_efforts_rejected",
        "replicas",
        "expected_model",
        "expected_fingerprint",  # what the probe saw, per replica
        "dropped_params",
        "notices",
        "stats",
        "capabilities_probed_at",
        "scoring",  # hf: tree-mask or padded log-likelihood path (equal within fp32 rounding)
    }
)

COMMIT_EVERY_S = 1.0
COLUMNS = ("key", "value", "created")

log = logging.getLogger(__name__)


def is_damage(e: BaseException) -> bool:
    """Whether a SQLite error means the file itself is unusable (not SQLite, malformed, or of
    another schema), as opposed to busy, locked or out of space, which pass."""
    if not isinstance(e, sqlite3.DatabaseError):
        return False
    name = getattr(e, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return True
    low = str(e).lower()
    return any(
        m in low
        for m in (
            "malformed",
            "not a database",
            "no such table",
            "no such column",
            "has no column",
            "encrypted",
        )
    )


def set_aside(path: Path, inode: int | None = None) -> Path | None:
    """Move a damaged SQLite file (and its -wal, -shm) to `<name>.damaged-<time>` beside it,
    kept for a look; returns the new name, or None when `path` is no longer the file with
    `inode` (another process set it aside and started a new one already) or cannot be moved."""
    try:
        if inode is not None and path.stat().st_ino != inode:
            return None
        aside = path.with_name(
            f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        )
        os.replace(path, aside)
    except OSError:
        return None
    for suffix in ("-wal", "-shm", "-journal"):
        try:
            os.replace(f"{path}{suffix}", f"{aside}{suffix}")
        except OSError:
            pass
    return aside


def cache_path() -> Path | None:
    """Where the shared cache lives, or None when `$LLMSCOPE_RESPONSE_CACHE` is `off`."""
    env = os.environ.get("LLMSCOPE_RESPONSE_CACHE")
    if env:
        return (
            None if env.strip().lower() in ("off", "0", "no", "false") else Path(env).expanduser()
        )
    from llmscope.engine.models import cache_dir

    return cache_dir() / "responses.sqlite"


class ResponseCache:
    """The SQLite table of cached responses; safe to share between threads and processes.

    `warn(message)` is told once when the file is found damaged and replaced (`set_aside`);
    `rebuilt` counts those replacements, `errors` the calls answered as misses because of them.
    """

    def __init__(self, path: str | Path, warn: Any = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._warn = warn
        self._warned = False
        self.rebuilt = 0
        self.errors = 0
        self._pending: list[tuple[str, str, float]] = []
        self._last_commit = time.monotonic()
        self._con: sqlite3.Connection | None = None
        self._inode: int | None = None
        try:
            self._open()
        except sqlite3.Error as e:
            if not is_damage(e):
                raise
            self._replace(e)  # at most once: a second failure is not the old file's fault

    def _open(self) -> None:
        con = sqlite3.connect(
            str(self.path), timeout=10.0, check_same_thread=False, isolation_level=None
        )
        try:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA busy_timeout=10000")
            con.execute(
                "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL)"
            )
            cols = tuple(r[1] for r in con.execute("PRAGMA table_info(responses)").fetchall())
            if cols != COLUMNS:
                raise sqlite3.DatabaseError(
                    f"has no column layout {COLUMNS} (responses{cols}: another schema)"
                )
            self._inode = self.path.stat().st_ino  # to tell whether another process replaced it
        except BaseException:
            con.close()
            raise
        self._con = con

    def drop(self, key: str) -> None:
        """Forget one entry whose value could not be read back (asked again, stored again)."""
        with self._lock:
            self.errors += 1
            self._pending = [p for p in self._pending if p[0] != key]
            if self._con is None:
                return
            try:
                self._con.execute("DELETE FROM responses WHERE key = ?", [key])
            except sqlite3.Error as e:
                if is_damage(e):
                    self._damaged(e)

    def _replace(self, err: BaseException) -> None:
        """Set the damaged file aside, start a new one, and say so once (caller holds the lock,
        or is the constructor)."""
        if self._con is not None:
            try:
                self._con.close()
            except sqlite3.Error:
                pass
            self._con = None
        aside = set_aside(self.path, self._inode)
        self.rebuilt += 1
        self._pending = []
        msg = (
            f"response cache {self.path} is unusable ({str(err).splitlines()[0] if str(err) else type(err).__name__}); "
            + (
                f"moved it to {aside.name} and started a new one"
                if aside is not None
                else "another process replaced it already; using the new one"
            )
            + " (answers are asked again; the run is not affected)"
        )
        if not self._warned:
            self._warned = True
            if self._warn is not None:
                self._warn(msg)
            else:
                log.warning(msg)
        self._open()

    def _damaged(self, err: BaseException) -> None:
        """A read or write met damage: one call becomes a miss; the file is replaced, or
        (if that fails too) the cache is left off for the rest of the run."""
        self.errors += 1
        try:
            self._replace(err)
        except (OSError, sqlite3.Error):
            self._con = None

    def get(self, key: str) -> Any | None:
        with self._lock:
            for k, v, _ in self._pending:
                if k == key:
                    return json.loads(v)
            if self._con is None:
                return None
            try:
                row = self._con.execute(
                    "SELECT value FROM responses WHERE key = ?", [key]
                ).fetchone()
                return None if row is None else json.loads(row[0])
            except sqlite3.Error as e:
                if is_damage(e):
                    self._damaged(e)
                return None
            except (ValueError, TypeError) as e:  # a value that is not our JSON: damage too
                self._damaged(e)
                return None

    def put(self, key: str, value: Any) -> None:
        text = json.dumps(value, allow_nan=True)
        with self._lock:
            self._pending.append((key, text, time.time()))
            if time.monotonic() - self._last_commit >= COMMIT_EVERY_S or len(self._pending) >= 512:
                self._flush_locked()

    def _flush_locked(self) -> None:
        if self._pending and self._con is not None:
            try:
                self._con.execute("BEGIN IMMEDIATE")
                self._con.executemany(
                    "INSERT OR IGNORE INTO responses VALUES (?, ?, ?)", self._pending
                )
                self._con.execute("COMMIT")
            except sqlite3.Error as e:
                # A busy or full cache must never fail a run: the answers are in the results.
                try:
                    self._con.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                if is_damage(e):
                    self._damaged(e)
        self._pending = []
        self._last_commit = time.monotonic()

    def close(self) -> None:
        with self._lock:
            self._flush_locked()
            if self._con is not None:
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

    def start_tokens(self) -> Any:
        return self.inner.start_tokens()

    async def probe(
        self, task: Any = None, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        await self.inner.probe(task, options)
        return self.describe()

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "response_cache": str(self.cache.path)}

    def stats(self) -> dict[str, Any]:
        out = {**self.inner.stats(), "cache_hits": self.hits, "cache_misses": self.misses}
        if self.cache.rebuilt:  # recorded with the run: a damaged cache was replaced
            out.update(cache_rebuilt=self.cache.rebuilt, cache_errors=self.cache.errors)
        return out

    def render(self, prompt: str, *, chat: bool = True) -> str:
        return self.inner.render(prompt, chat=chat)

    async def next_token(
        self, prompt: str, answers: list[str], *, chat: bool = True, top_k: int = 20
    ) -> NextTokenOut:
        key = _key(self._ident(), "next_token", [prompt, list(answers), chat, top_k])
        hit = self.cache.get(key)
        if hit is not None:
            try:
                hit["top"] = [TopToken(**t) for t in hit["top"]]
                out = NextTokenOut(**hit)
                out.meta = {**out.meta, "cache": "hit"}
                self.hits += 1
                return out
            except (TypeError, KeyError, AttributeError):  # not a stored answer: ask again
                self.cache.drop(key)
        self.misses += 1
        out = await self.inner.next_token(prompt, answers, chat=chat, top_k=top_k)
        sampled = out.meta.get("method") == "sampled-estimate"
        if not sampled or out.meta.get("seed") is not None:
            self.cache.put(key, dataclasses.asdict(out))
        return out

    async def loglik(
        self, requests: list[tuple[str, str]], *, chat: bool = False
    ) -> list[LogLikOut]:
        key = _key(self._ident(), "loglik", [[list(r) for r in requests], chat])
        hit = self.cache.get(key)
        if hit is not None:
            try:
                if any("greedy" not in o for o in hit):
                    # stored before is_greedy was recorded: asked again, so an lm-eval export has it
                    raise KeyError("greedy")
                outs = [LogLikOut(**o) for o in hit]
                self.hits += 1
                return outs
            except (TypeError, KeyError, AttributeError):
                self.cache.drop(key)
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
                try:
                    out = GenerateOut(**hit)
                    out.meta = {**out.meta, "cache": "hit"}
                    self.hits += 1
                    return out
                except (TypeError, KeyError, AttributeError):
                    self.cache.drop(key)
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
        cache = ResponseCache(path, warn=warn)
    except (OSError, sqlite3.Error) as e:
        if warn is not None:
            warn(f"response cache disabled: cannot open {path}: {e}")
        return backend
    return CachedBackend(backend, cache)
