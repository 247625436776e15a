"""A GGUF file's metadata is parsed once per load (engine/hf/loading.py `_gguf_parsed_once`)."""

from __future__ import annotations

import pytest


def test_one_reader_per_file_during_a_load_and_the_class_restored_after() -> None:
    gguf = pytest.importorskip("gguf")
    from llmscope.engine.hf.loading import _gguf_parsed_once
    from llmscope.engine.models import ModelSpecError, embedded_model_path

    try:
        path = str(embedded_model_path())
    except ModelSpecError as e:
        pytest.skip(str(e))
    orig = gguf.GGUFReader
    with _gguf_parsed_once():
        # what transformers' load_gguf_checkpoint does for the tokenizer, config and weights
        from gguf import GGUFReader

        a, b = GGUFReader(path), GGUFReader(path)
        assert a is b
        assert isinstance(a, orig) and len(a.tensors) > 0
    assert gguf.GGUFReader is orig
