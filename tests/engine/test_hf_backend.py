"""HFBackend batching, shared-prefix cache, OOM back-off and head-only-where-read, on a tiny model.

Expected values come from direct transformers forwards over each unpadded sequence.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from llmscope.engine.hf import HFBackend  # noqa: E402
from tests.helpers.lmwrap import LMWrapper  # noqa: E402
from tests.helpers.tinymodel import make_tiny_model, tiny_family_model, tiny_spec  # noqa: E402

PROMPTS = [
    f"Is a {a} bigger than a {b}?"
    for a in ("cat", "dog", "house", "tree")
    for b in ("stone", "bird", "car")
]
PAIRS = [
    ("Question: which of these is an animal?\nAnswer:", " a dog"),
    ("Question: which of these is an animal?\nAnswer:", " the big stone"),
    ("Question: which of these is an animal?\nAnswer:", " no"),
    ("Question: which of these is an animal?\nAnswer:", " yes"),
    ("Is the sky blue? ", "yes"),  # trailing space moves into the continuation
    ("Q", " red green blue"),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    d = tmp_path_factory.mktemp("tiny")
    model, tok = make_tiny_model(d, vocab="trained")
    return model, tok, tiny_spec(d)


def _backend(
    tiny: tuple[Any, Any, Any], batch_size: int, model: Any = None, prefix: bool = True
) -> HFBackend:
    m, tok, spec = tiny
    b = HFBackend(
        spec, model=model or m, tokenizer=tok, device="cpu", dtype="float32", batch_size=batch_size
    )
    b.prefix_cache = prefix
    return b


def _run(b: HFBackend) -> tuple[list[Any], list[Any]]:
    async def go() -> tuple[list[Any], list[Any]]:
        try:
            nxt = await asyncio.gather(*[b.next_token(p, ["yes", "no"], top_k=5) for p in PROMPTS])
            ll = await b.loglik(PAIRS)
            return list(nxt), ll
        finally:
            await b.aclose()

    return asyncio.run(go())


def _assert_same(
    ref_next: list[Any], got_next: list[Any], ref_ll: Sequence[Any] = (), got_ll: Sequence[Any] = ()
) -> None:
    """Next-token probabilities and per-token log-likelihoods equal the reference run's."""
    for a, c in zip(ref_next, got_next, strict=True):
        assert c.probs == pytest.approx(a.probs, abs=1e-5)
    for a, c in zip(ref_ll, got_ll, strict=True):
        assert c.token_logprobs == pytest.approx(a.token_logprobs, abs=1e-5)


def _direct_next(model: Any, ids: list[int]) -> Any:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
    return torch.softmax(logits.double(), -1)


def _direct_loglik(model: Any, tok: Any, context: str, cont: str) -> list[float]:
    # Independent of the backend: the lm-eval rule done by hand.
    n = len(context) - len(context.rstrip(" "))
    if n:
        context, cont = context[:-n], context[-n:] + cont
    whole = tok(context + cont, add_special_tokens=False).input_ids
    k = len(whole) - len(tok(context, add_special_tokens=False).input_ids)
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=torch.tensor([whole])).logits[0].double(), -1)
    return [float(lp[len(whole) - k - 1 + i, whole[len(whole) - k + i]]) for i in range(k)]


def test_results_match_direct_forward_for_every_batch_size(tiny: tuple[Any, Any, Any]) -> None:
    model, tok, _ = tiny
    expected_ll = [_direct_loglik(model, tok, c, x) for c, x in PAIRS]
    for bs in (1, 3, 8):
        b = _backend(tiny, bs)
        nxt, ll = _run(b)
        for p, out in zip(PROMPTS, nxt, strict=True):
            ids = tok.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
            )
            probs = _direct_next(model, tok(ids, add_special_tokens=False).input_ids)
            for ans, vids in b.answer_token_ids(["yes", "no"]).items():
                assert out.probs[ans] == pytest.approx(float(probs[vids].sum()), abs=1e-5)
            assert out.top[0].id == int(probs.argmax())
            assert out.top[0].prob == pytest.approx(float(probs.max()), abs=1e-5)
        for got, exp in zip(ll, expected_ll, strict=True):
            assert got.n_tokens == len(exp)
            assert got.token_logprobs == pytest.approx(exp, abs=1e-5)
            assert got.logprob == pytest.approx(math.fsum(exp), abs=1e-5)


def test_shared_prefix_cache_equals_uncached_path(tiny: tuple[Any, Any, Any]) -> None:
    plain = _backend(tiny, 8, prefix=False)
    ref_next, ref_ll = _run(plain)
    cached = _backend(tiny, 8, prefix=True)
    got_next, got_ll = _run(cached)
    st = cached.stats()
    # The chat system prompt is common to every prompt: it must have been reused.
    assert st["prefix_builds"] >= 1 and st["tokens_prefix_reused"] > 0
    assert st["tokens_computed"] < plain.stats()["tokens_computed"]
    for a, b in zip(ref_next, got_next, strict=True):
        assert b.probs == pytest.approx(a.probs, abs=1e-5)
        assert b.other == pytest.approx(a.other, abs=1e-5)
    for a, b in zip(ref_ll, got_ll, strict=True):
        assert b.token_logprobs == pytest.approx(a.token_logprobs, abs=1e-5)


class _OOMAbove(LMWrapper):
    """Wraps a model and fails like a full GPU for batches larger than `limit`."""

    def __init__(self, inner: Any, limit: int) -> None:
        super().__init__(inner)
        self.limit = limit
        self.sizes: list[int] = []

    def forward(self, input_ids: Any = None, logits_to_keep: int = 0, **kw: Any) -> Any:
        self.sizes.append(int(input_ids.shape[0]))
        if input_ids.shape[0] > self.limit:
            raise torch.OutOfMemoryError("simulated: CUDA out of memory")
        return self.inner(input_ids=input_ids, logits_to_keep=logits_to_keep, **kw)


def test_out_of_memory_backs_off_without_losing_items(tiny: tuple[Any, Any, Any]) -> None:
    ref_next, ref_ll = _run(_backend(tiny, 1))
    wrapped = _OOMAbove(tiny[0], limit=3)
    b = _backend(tiny, 16, model=wrapped)
    got_next, got_ll = _run(b)
    assert b.stats()["oom_backoffs"] >= 1
    assert b.batch_size <= 3
    assert max(wrapped.sizes) > 3 and any(s <= 3 for s in wrapped.sizes)
    assert len(got_next) == len(PROMPTS) and len(got_ll) == len(PAIRS)
    _assert_same(ref_next, got_next, ref_ll, got_ll)


class _NoKeep(LMWrapper):
    """A causal LM whose forward has no `logits_to_keep`: the head must be applied by hand."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.head_rows: list[int] = []

    def forward(self, input_ids: Any = None, **kw: Any) -> Any:
        return self.inner(input_ids=input_ids, **kw)

    def get_decoder(self) -> Any:
        return self.inner.model

    def get_output_embeddings(self) -> Any:
        head = self.inner.get_output_embeddings()

        def apply(h: Any) -> Any:
            self.head_rows.append(int(h.shape[1]))
            return head(h)

        return apply


def test_head_only_at_scored_positions_without_logits_to_keep(tiny: tuple[Any, Any, Any]) -> None:
    ref_next, ref_ll = _run(_backend(tiny, 4))
    wrapped = _NoKeep(tiny[0])
    b = _backend(tiny, 4, model=wrapped)
    assert not b._keeps_logits
    probe_rows = len(wrapped.head_rows)  # the tree-mask check at load time
    got_next, got_ll = _run(b)
    # Next-token batches read one position; loglik batches read the longest continuation,
    # or with the tree mask a context's last position plus its options' other tokens.
    longest = max(x.n_tokens for x in ref_ll)
    if b.tree_mask:
        per_ctx: dict[str, int] = {}
        for (c, _), x in zip(PAIRS, ref_ll, strict=True):
            per_ctx[c] = per_ctx.get(c, 1) + x.n_tokens - 1
        longest = max(per_ctx.values())
    assert wrapped.head_rows[probe_rows:] and max(wrapped.head_rows[probe_rows:]) == longest
    _assert_same(ref_next, got_next, ref_ll, got_ll)


def test_single_token_options_share_one_row(tiny: tuple[Any, Any, Any]) -> None:
    model, tok, _ = tiny
    ctx = "Question: which of these is an animal?\nAnswer:"
    opts = [" yes", " no", " a", " b"]
    assert all(len(tok(o, add_special_tokens=False).input_ids) == 1 for o in opts)
    b = _backend(tiny, 8)

    async def go() -> list[Any]:
        try:
            return await b.loglik([(ctx, o) for o in opts])
        finally:
            await b.aclose()

    out = asyncio.run(go())
    assert b.stats()["loglik_rows_saved"] == len(opts) - 1
    for o, r in zip(opts, out, strict=True):
        assert r.token_logprobs == pytest.approx(_direct_loglik(model, tok, ctx, o), abs=1e-5)


MC_CTX = "Question: which of these is an animal?\nAnswer:"
MC_OPTS = [" a dog", " the big stone", " red green blue", " a cat", " yes"]


def test_options_of_one_context_continue_its_kv_cache(tiny: tuple[Any, Any, Any]) -> None:
    model, tok, _ = tiny
    assert sum(len(tok(o, add_special_tokens=False).input_ids) > 1 for o in MC_OPTS) >= 3
    reqs = [(MC_CTX, o) for o in MC_OPTS] + [("Is the sky blue?", " no sir"), ("Q", " red")]
    expected = [_direct_loglik(model, tok, c, x) for c, x in reqs]
    computed = {}
    for bs, share in ((8, True), (2, True), (1, True), (8, False), (2, False), (1, False)):
        b = _backend(tiny, bs)
        b.context_cache = share
        b.tree_mask = False  # the padded path (the fallback of the tree mask)

        async def go(b: HFBackend = b) -> list[Any]:
            try:
                return await b.loglik(reqs)
            finally:
                await b.aclose()

        out = asyncio.run(go())
        for got, exp in zip(out, expected, strict=True):
            assert got.token_logprobs == pytest.approx(exp, abs=1e-5)
            assert got.logprob == pytest.approx(math.fsum(exp), abs=1e-5)
        st = b.stats()
        computed[(bs, share)] = st["tokens_computed"]
        if share and bs == 8:
            # The multi-token options of MC_CTX ran on top of its cache, one row each.
            n_multi = sum(len(tok(o, add_special_tokens=False).input_ids) > 1 for o in MC_OPTS)
            assert st["loglik_context_shared"] == n_multi
    assert computed[(8, True)] < computed[(8, False)]


class _TokProxy:
    """Delegates to a tokenizer and records which threads call it."""

    def __init__(self, inner: Any) -> None:
        self.__dict__["inner"] = inner
        self.__dict__["threads"] = set()

    def __call__(self, *a: Any, **kw: Any) -> Any:
        import threading

        self.threads.add(threading.current_thread().name)
        return self.inner(*a, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.inner, name, value)

    def __len__(self) -> int:
        return len(self.inner)


def test_tokenising_happens_off_the_event_loop_and_model_threads(
    tiny: tuple[Any, Any, Any],
) -> None:
    import threading

    ref_next, ref_ll = _run(_backend(tiny, 4))
    b = _backend(tiny, 4)
    proxy = _TokProxy(b.tok)
    b.tok = proxy
    loop_thread = threading.current_thread().name
    got_next, got_ll = _run(b)
    assert proxy.threads == {"llmscope-hf-tok"} and loop_thread not in proxy.threads
    _assert_same(ref_next, got_next, ref_ll, got_ll)


def test_bad_request_fails_only_its_own_call(tiny: tuple[Any, Any, Any]) -> None:
    from llmscope.engine.backend import BackendError

    b = _backend(tiny, 4)

    async def go() -> list[Any]:
        try:
            return await asyncio.gather(
                b.loglik([("Q", " red"), ("Q", "")]), b.loglik(PAIRS[:2]), return_exceptions=True
            )
        finally:
            await b.aclose()

    bad, good = asyncio.run(go())
    assert isinstance(bad, BackendError) and "adds no tokens" in str(bad)
    assert [x.n_tokens for x in good] == [
        len(_direct_loglik(tiny[0], tiny[1], *p)) for p in PAIRS[:2]
    ]


def test_threads_setting_is_reported_and_local_to_the_model_thread(
    tiny: tuple[Any, Any, Any],
) -> None:
    m, tok, spec = tiny
    before = torch.get_num_threads()
    b = HFBackend(spec, model=m, tokenizer=tok, device="cpu", dtype="float32", threads=1)
    _run(b)
    d = b.describe()
    assert d["threads"] == 1 and d["torch_threads"] == 1
    assert torch.get_num_threads() == before  # the caller's thread keeps its own setting
    default = _backend(tiny, 4)
    _run(default)
    assert default.describe()["threads"] is None


class _OOMTimes(_OOMAbove):
    """Fails batches larger than `limit` only `times` times (a transient memory spike)."""

    def __init__(self, inner: Any, limit: int, times: int) -> None:
        super().__init__(inner, limit)
        self.times = times

    def forward(self, input_ids: Any = None, logits_to_keep: int = 0, **kw: Any) -> Any:
        if input_ids.shape[0] > self.limit and self.times > 0:
            self.times -= 1
            self.sizes.append(int(input_ids.shape[0]))
            raise torch.OutOfMemoryError("simulated: CUDA out of memory")
        self.sizes.append(int(input_ids.shape[0]))
        return self.inner(input_ids=input_ids, logits_to_keep=logits_to_keep, **kw)


MANY = [f"{p} Think of {w}." for p in PROMPTS for w in ("it", "them", "rain", "snow")]


class _Held(HFBackend):
    """Its model thread starts once `hold` calls are tokenised and queued.

    The model thread batches whatever is queued when it looks; on a loaded machine the
    tokeniser can lag, and the first batches came out smaller than 16 (a flaky test). Held
    back, it finds every call waiting, so the batches are cut from the whole queue each time.
    """

    def __init__(self, *args: Any, hold: int, **kw: Any) -> None:
        self._hold = hold  # set before HFBackend.__init__ starts the threads
        super().__init__(*args, **kw)

    def _worker(self) -> None:
        end = time.monotonic() + 120  # a bound against hanging, never reached when all goes well
        while self._queue.qsize() < self._hold and time.monotonic() < end:
            time.sleep(0.001)
        super()._worker()


def _held_backend(tiny: tuple[Any, Any, Any], batch_size: int, model: Any, hold: int) -> HFBackend:
    m, tok, spec = tiny
    b = _Held(
        spec,
        model=model,
        tokenizer=tok,
        device="cpu",
        dtype="float32",
        batch_size=batch_size,
        hold=hold,
    )
    b.prefix_cache = False
    return b


def _next_all(b: HFBackend, prompts: list[str]) -> list[Any]:
    async def go() -> list[Any]:
        try:
            return list(await asyncio.gather(*[b.next_token(p, ["yes", "no"]) for p in prompts]))
        finally:
            await b.aclose()

    return asyncio.run(go())


def test_batch_size_grows_back_after_a_transient_out_of_memory(
    tiny: tuple[Any, Any, Any],
) -> None:
    ref = _next_all(_backend(tiny, 1), MANY)
    wrapped = _OOMTimes(tiny[0], limit=8, times=1)
    b = _held_backend(tiny, 16, wrapped, hold=len(MANY))
    b.grow_after = 2
    wrapped.sizes.clear()  # not the tree-mask check at load time
    got = _next_all(b, MANY)
    st = b.stats()
    # 16 fails once -> 8, two full batches of 8 -> 12, two of 12 -> 16.
    assert st["oom_backoffs"] == 1 and st["batch_regrowths"] == 2
    assert b.batch_size == 16 and wrapped.sizes[:4] == [16, 8, 8, 12]
    _assert_same(ref, got)


def test_regrowth_slows_down_when_the_larger_batch_fails_again(
    tiny: tuple[Any, Any, Any],
) -> None:
    ref = _next_all(_backend(tiny, 1), MANY)
    wrapped = _OOMAbove(tiny[0], limit=5)
    b = _held_backend(tiny, 16, wrapped, hold=len(MANY))
    b.grow_after = 2
    wrapped.sizes.clear()  # not the tree-mask check at load time
    got = _next_all(b, MANY)
    # 16 -> 8 -> 4 (fits), grows to 6 after two full batches, fails, back to 3: wait longer.
    assert wrapped.sizes[:6] == [16, 8, 4, 4, 6, 3]
    assert b.grow_after >= 4 and b.stats()["oom_backoffs"] >= 3
    _assert_same(ref, got)


def test_sliding_window_cache_falls_back_to_one_row_per_option(
    tiny: tuple[Any, Any, Any],
) -> None:
    _, tok, spec = tiny
    model = tiny_family_model("mistral", tok, seed=1, sliding_window=4096)
    reqs = [(MC_CTX, o) for o in MC_OPTS]
    expected = [_direct_loglik(model, tok, c, x) for c, x in reqs]
    b = HFBackend(spec, model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=8)
    b.tree_mask = False  # the padded path (the fallback of the tree mask)

    async def go() -> list[Any]:
        try:
            return await b.loglik(reqs)
        finally:
            await b.aclose()

    out = asyncio.run(go())
    # Sliding-window layers cannot be gathered per row: both caches switch themselves off.
    assert b.context_cache is False and b.prefix_cache is False
    for got, exp in zip(out, expected, strict=True):
        assert got.token_logprobs == pytest.approx(exp, abs=1e-5)
