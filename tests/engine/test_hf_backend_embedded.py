"""The embedded SmolLM2 model: batch sizes 1, 3 and 8 (with the shared-prefix cache) agree."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("torch")

from llmscope.engine.models import ModelSpecError, parse_model  # noqa: E402

PROMPTS = [
    "Is water wet? Answer yes or no.",
    'Consider the statement, "A cat doesn\'t want a bath." Do you agree with this statement?',
    "Can fish fly? Answer yes or no.",
    "Is Paris the capital of France?",
]
PAIRS = [
    ("Question: What is the capital of France?\nAnswer:", " Paris"),
    ("Question: What is the capital of France?\nAnswer:", " the city of Rome"),
    ("Question: What is two plus two?\nAnswer:", " four"),
]


@pytest.mark.slow
def test_embedded_model_batch_size_invariance() -> None:
    try:
        spec = parse_model(None)
    except ModelSpecError as e:
        pytest.skip(str(e))
    from llmscope.engine.hf import HFBackend, load_model

    tok, model, _ = load_model(spec, "cpu", "float32")

    def run(bs: int) -> tuple[list[Any], list[Any]]:
        b = HFBackend(
            spec, model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=bs
        )

        async def go() -> tuple[list[Any], list[Any]]:
            try:
                nxt = await asyncio.gather(*[b.next_token(p, ["yes", "no"]) for p in PROMPTS])
                return list(nxt), await b.loglik(PAIRS)
            finally:
                await b.aclose()

        return asyncio.run(go())

    ref_next, ref_ll = run(1)
    assert sum(ref_next[0].probs.values()) > 0.01  # the instruct model does answer yes/no
    for bs in (3, 8):
        got_next, got_ll = run(bs)
        for a, c in zip(ref_next, got_next, strict=True):
            assert c.probs["yes"] == pytest.approx(a.probs["yes"], abs=1e-5)
            assert c.probs["no"] == pytest.approx(a.probs["no"], abs=1e-5)
        for a, c in zip(ref_ll, got_ll, strict=True):
            # Sums of ~-20 in fp32: compare relative to the magnitude, as rounding is.
            assert c.logprob == pytest.approx(a.logprob, rel=1e-5, abs=1e-5)
            assert c.token_logprobs == pytest.approx(a.token_logprobs, rel=1e-5, abs=1e-5)
