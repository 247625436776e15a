"""Reference models for tests: a GGUF file loaded straight with transformers (no llmscope code).

Several real-model tests check llmscope's numbers against a direct transformers forward pass
on the same GGUF file. Loading a GGUF through transformers parses the file's metadata three
times (tokenizer, config, weights); for Gemma's 262k-token vocabulary that is ~45 of the ~70 CPU
seconds a load takes. `load_gguf` parses it once per load and keeps the loaded pair for the
rest of the worker process, so tests in one process share it. The weights, tokenizer and
configuration are transformers' own, exactly as `from_pretrained(..., gguf_file=...)` gives.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    # transformers imports GGUFReader from the gguf package when it loads a checkpoint
    # (transformers.modeling_gguf_pytorch_utils.load_gguf_checkpoint), so swapping the
    # package attribute for a memoised one while the load runs makes its three reads one.
    # Were that import to move, the swap is a no-op: same result, just slower.
    import gguf

    orig = gguf.GGUFReader
    gguf.GGUFReader = functools.lru_cache(maxsize=4)(orig)  # type: ignore[misc]
    try:
        yield
    finally:
        gguf.GGUFReader = orig  # type: ignore[misc]


@functools.lru_cache(maxsize=2)
def load_gguf(path: str | Path) -> tuple[Any, Any]:
    """(tokenizer, float32 model in eval mode) for a GGUF file, read by transformers alone.

    Shared within a process: callers must not modify the model or tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(path)
    with _gguf_parsed_once():
        tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(p.parent), gguf_file=p.name, dtype=torch.float32
        ).eval()
    return tok, model
