"""Tree attention mask for log-likelihoods (engine/hf/tree.py).

One row per context: the context once, every option's tokens as branches after it, a 4-D
mask so each option token sees only the context and its own earlier tokens. Expected
values come from one plain transformers forward per (context, option), computed here.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from llmscope.engine.hf import HFBackend  # noqa: E402
from tests.helpers.lmwrap import LMWrapper  # noqa: E402
from tests.helpers.tinymodel import make_tiny_model, tiny_family_model, tiny_spec  # noqa: E402

CTX = "Question: which of these is an animal?\nAnswer:"
REQS = [
    (CTX, " a dog"),
    (CTX, " the big stone"),
    (CTX, " red green blue"),
    (CTX, " yes"),
    ("Is the sky blue? ", "yes it is"),  # trailing space moves into the continuation
    ("Q", " red"),
    ("", "a cat can swim"),  # empty context: scored after BOS/EOS
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    d = tmp_path_factory.mktemp("tiny")
    model, tok = make_tiny_model(d, vocab="trained")
    return model, tok, tiny_spec(d)


def _direct(model: Any, tok: Any, context: str, cont: str) -> list[float]:
    """Per-token log-probs of `cont` after `context` from one plain, unpadded forward."""
    n = len(context) - len(context.rstrip(" "))
    if n:
        context, cont = context[:-n], context[-n:] + cont
    if context:
        whole = tok(context + cont, add_special_tokens=False).input_ids
        k = len(whole) - len(tok(context, add_special_tokens=False).input_ids)
    else:
        start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        k = len(tok(cont, add_special_tokens=False).input_ids)
        whole = [start, *tok(cont, add_special_tokens=False).input_ids]
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=torch.tensor([whole])).logits[0].double(), -1)
    return [float(lp[len(whole) - k - 1 + i, whole[len(whole) - k + i]]) for i in range(k)]


def _loglik(b: HFBackend, reqs: list[tuple[str, str]], chat: bool = False) -> list[Any]:
    async def go() -> list[Any]:
        try:
            return list(await b.loglik(reqs, chat=chat))
        finally:
            await b.aclose()

    return asyncio.run(go())


def _check(out: list[Any], expected: list[list[float]]) -> None:
    for got, exp in zip(out, expected, strict=True):
        assert got.n_tokens == len(exp)
        assert got.token_logprobs == pytest.approx(exp, abs=1e-4)
        assert got.logprob == pytest.approx(math.fsum(exp), abs=1e-4)


def test_tree_path_equals_one_plain_forward_per_option(tiny: tuple[Any, Any, Any]) -> None:
    model, tok, spec = tiny
    assert (
        sum(len(tok(x, add_special_tokens=False).input_ids) > 1 for c, x in REQS if c == CTX) >= 2
    )
    expected = [_direct(model, tok, c, x) for c, x in REQS]
    for bs in (1, 2, 8):
        b = HFBackend(
            spec, model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=bs
        )
        assert b.tree_mask and b.describe()["scoring"]["loglik_path"] == "tree"
        _check(_loglik(b, REQS), expected)
        st = b.stats()
        assert st["loglik_tree_batches"] >= 1 and "loglik_context_shared" not in st
        if bs == 8:
            # One batch; one row per distinct context (4), the CTX options share theirs.
            assert st["loglik_tree_batches"] == 1 and st["loglik_tree_rows"] == 4
            assert st["loglik_rows_saved"] == len(REQS) - 4


def test_tree_rows_reuse_the_shared_prefix_cache(tiny: tuple[Any, Any, Any]) -> None:
    model, tok, spec = tiny
    reqs = [
        (f"Is a {a} an animal?", o)
        for a in ("cat", "stone", "river")
        for o in (" yes it is", " no")
    ]
    rendered = [
        tok.apply_chat_template(
            [{"role": "user", "content": c}], add_generation_prompt=True, tokenize=False
        )
        for c, _ in reqs
    ]
    expected = [_direct(model, tok, r, x) for r, (_, x) in zip(rendered, reqs, strict=True)]
    b = HFBackend(spec, model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=8)
    _check(_loglik(b, reqs, chat=True), expected)
    st = b.stats()
    assert (
        st["prefix_builds"] >= 1 and st["tokens_prefix_reused"] > 0 and st["loglik_tree_rows"] == 3
    )


def test_tree_and_padded_paths_agree(tiny: tuple[Any, Any, Any]) -> None:
    model, tok, spec = tiny
    outs = []
    for tree in (True, False):
        b = HFBackend(spec, model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=4)
        b.tree_mask = tree
        outs.append(_loglik(b, REQS))
    for a, c in zip(*outs, strict=True):
        assert c.token_logprobs == pytest.approx(a.token_logprobs, abs=1e-5)


class _IgnoresMask(LMWrapper):
    """A causal LM that drops any attention mask it is given (as some remote-code models do)."""

    def forward(
        self, input_ids: Any = None, attention_mask: Any = None, logits_to_keep: int = 0, **kw: Any
    ) -> Any:
        return self.inner(input_ids=input_ids, logits_to_keep=logits_to_keep, **kw)


def test_a_model_that_ignores_the_mask_falls_back_to_the_padded_path(
    tiny: tuple[Any, Any, Any],
) -> None:
    model, tok, spec = tiny
    b = HFBackend(
        spec, model=_IgnoresMask(model), tokenizer=tok, device="cpu", dtype="float32", batch_size=8
    )
    scoring = b.describe()["scoring"]
    assert not b.tree_mask and scoring["loglik_path"] == "padded"
    assert "differs from plain forwards" in scoring["reason"]
    # Only single-row, unpadded work reaches a mask-ignoring model correctly: one request.
    out = _loglik(b, [REQS[1]])
    _check(out, [_direct(model, tok, *REQS[1])])
    assert "loglik_tree_batches" not in b.stats()


def test_environment_switch_selects_the_padded_path(
    tiny: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tok, spec = tiny
    monkeypatch.setenv("LLMSCOPE_TREE_MASK", "0")
    b = HFBackend(spec, model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=8)
    assert b.describe()["scoring"] == {"loglik_path": "padded", "reason": "LLMSCOPE_TREE_MASK=0"}
    _check(_loglik(b, REQS), [_direct(model, tok, c, x) for c, x in REQS])
    assert "loglik_tree_batches" not in b.stats()


@pytest.mark.parametrize(("kind", "window"), [("qwen2", None), ("gemma3", 512), ("mistral", 4096)])
def test_tree_path_on_other_model_families(
    tiny: tuple[Any, Any, Any], kind: str, window: int | None
) -> None:
    _, tok, spec = tiny
    model = tiny_family_model(kind, tok, **({"sliding_window": window} if window else {}))
    expected = [_direct(model, tok, c, x) for c, x in REQS]
    b = HFBackend(spec, model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=8)
    assert b.tree_mask, b.scoring
    _check(_loglik(b, REQS), expected)
    assert b.stats()["loglik_tree_batches"] == 1


def test_rows_longer_than_a_sliding_window_take_the_padded_path(tiny: tuple[Any, Any, Any]) -> None:
    _, tok, spec = tiny
    # The probe's 9 tokens fit in the window; CTX with its options does not.
    model = tiny_family_model("mistral", tok, sliding_window=12)
    expected = [_direct(model, tok, c, x) for c, x in REQS]
    b = HFBackend(spec, model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=8)
    assert b.tree_mask
    _check(_loglik(b, REQS), expected)
    st = b.stats()
    assert st["loglik_tree_skipped_window"] >= 1 and "loglik_tree_batches" not in st


@pytest.mark.slow
def test_tree_path_on_the_embedded_smollm2() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llmscope.engine.models import parse_model

    try:
        spec = parse_model(None)
    except Exception as e:  # noqa: BLE001 - any reason the embedded model is absent
        pytest.skip(f"embedded SmolLM2 not available: {e}")
    b = HFBackend(spec, device="cpu", dtype="float32", batch_size=8, threads=1)
    assert b.describe()["scoring"]["loglik_path"] == "tree"
    reqs = [
        ("Question: Which of these can fly?\nAnswer:", " a small bird"),
        ("Question: Which of these can fly?\nAnswer:", " a large stone"),
        ("Question: Which of these can fly?\nAnswer:", " fish"),
        ("The capital of France is", " Paris, of course"),
    ]
    out = _loglik(b, reqs)
    # The reference: the same converted weights loaded straight through transformers.
    path = b.describe()["load"].get("gguf_cache")
    if path:
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    else:
        tok = AutoTokenizer.from_pretrained(spec.path, gguf_file=spec.gguf_file)
        model = AutoModelForCausalLM.from_pretrained(
            spec.path, gguf_file=spec.gguf_file, dtype=torch.float32
        ).eval()
    _check(out, [_direct(model, tok, c, x) for c, x in reqs])
    assert b.stats()["loglik_tree_rows"] == 2


def test_many_options_of_one_context_are_split_into_rows(tiny: tuple[Any, Any, Any]) -> None:
    model, tok, spec = tiny
    # Sentence scoring: every sentence's context is the BOS/EOS token alone.
    words = ("cat", "dog", "bird", "fish", "tree", "stone", "river", "city", "house", "road")
    reqs = [("", f"the {w} is big and red") for w in words]
    expected = [_direct(model, tok, c, x) for c, x in reqs]
    b = HFBackend(spec, model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=4)
    _check(_loglik(b, reqs), expected)
    # At most 4 options per row: rows of 4, 4, 2 (one batch of 3 rows).
    assert b.stats()["loglik_tree_rows"] == 3 and b.stats()["loglik_tree_batches"] == 1
    b = HFBackend(spec, model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=4)
    n_branch = len(tok("the cat is big and red", add_special_tokens=False).input_ids) - 1
    b.TREE_ROW_TOKENS = 2 * n_branch  # two options per row by the token budget
    _check(_loglik(b, reqs), expected)
    assert b.stats()["loglik_tree_rows"] == 5 and b.stats()["loglik_tree_batches"] == 2
