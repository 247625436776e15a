"""Forward passes: left-padded batches, logits only where read, and the shared-prefix KV cache."""

from __future__ import annotations

from typing import Any

from llmscope.engine.backend import BackendError


class ForwardPasses:
    """Forward passes over token rows (state set by `HFBackend.__init__`, engine/hf/backend.py)."""

    tok: Any
    model: Any
    device: str
    prefix_cache: bool
    min_prefix: int
    _keeps_logits: bool
    _prefix_ids: list[int]
    _prefix_kv: list[tuple[Any, Any]] | None
    _stats: dict[str, Any]

    def _forward_last(
        self,
        seqs: list[list[int]],
        keep: int,
        reserve: list[int] | None = None,
        *,
        want_cache: bool = False,
        past: tuple[Any, Any] | None = None,
    ) -> Any:
        """Left-padded forward pass; returns fp32 log-softmax of the last `keep` positions.

        `reserve[r]` is how many trailing tokens of row r are read (they must follow any
        shared prefix). A prefix common to every row is run once and its KV cache reused.
        `past=(cache, mask)` continues rows from a per-row cache instead. With
        `want_cache`, returns (log-probs, (cache, mask)) for such a continuation.
        """
        import torch

        reserve = reserve or [keep] * len(seqs)
        b = len(seqs)
        cache: Any = None
        if past is None:
            prefix = self._pick_prefix(seqs, reserve)
            p = len(prefix)
            sufs = [s[p:] for s in seqs]
            past_mask = torch.ones((b, p), dtype=torch.long)
            if p:
                cache = self._expand_prefix(b)
        else:
            cache, past_mask = past
            p = int(past_mask.shape[1])
            sufs = seqs
        n = max(len(s) for s in sufs)
        pad = self.tok.pad_token_id
        input_ids = torch.full((b, n), pad, dtype=torch.long)
        suf_mask = torch.zeros((b, n), dtype=torch.long)
        for r, s in enumerate(sufs):
            input_ids[r, n - len(s) :] = torch.tensor(s, dtype=torch.long)
            suf_mask[r, n - len(s) :] = 1
        mask = torch.cat([past_mask.to(self.device), suf_mask.to(self.device)], dim=1)
        # Positions count real tokens only, so padding between prefix and suffix is invisible.
        pos = (mask.cumsum(-1) - 1).clamp(min=0)[:, p:]
        input_ids = input_ids.to(self.device)
        kwargs: dict[str, Any] = {"attention_mask": mask, "position_ids": pos}
        kwargs["use_cache"] = cache is not None or want_cache
        if cache is not None:
            kwargs["past_key_values"] = cache
        self._stats["tokens_computed"] += sum(len(s) for s in sufs)
        self._stats["tokens_padding"] += b * n - sum(len(s) for s in sufs)
        self._stats["tokens_prefix_reused"] += int(past_mask.sum()) if p else 0
        logits, out_cache = self._logits(input_ids, keep, kwargs)
        logp = torch.log_softmax(logits.float(), dim=-1)
        return (logp, (out_cache, mask)) if want_cache else logp

    def _logits(self, input_ids: Any, keep: int, kwargs: dict[str, Any]) -> tuple[Any, Any]:
        """Logits of the last `keep` positions only: the LM head never sees other positions."""
        if self._keeps_logits:
            out = self.model(input_ids=input_ids, logits_to_keep=keep, **kwargs)
            return out.logits[:, -keep:, :], getattr(out, "past_key_values", None)
        base = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.model
        out = base(input_ids=input_ids, **kwargs)
        hidden = out.last_hidden_state[:, -keep:, :]
        return self.model.get_output_embeddings()(hidden), getattr(out, "past_key_values", None)

    # -- shared-prefix KV cache ----------------------------------------------------------
    def _pick_prefix(self, seqs: list[list[int]], reserve: list[int]) -> list[int]:
        """The prefix to run once: the batch's common prefix, or the cached one if nearly as long."""
        if not self.prefix_cache:
            return []
        limit = min(len(s) - k for s, k in zip(seqs, reserve, strict=True))
        first = seqs[0]
        cached = self._prefix_ids
        if len(seqs) < 2:
            # A lone row still reuses the cached prefix it starts with.
            ok = cached and len(cached) <= limit and first[: len(cached)] == cached
            return cached if ok else []
        n = 0
        while n < limit and all(len(s) > n and s[n] == first[n] for s in seqs):
            n += 1
        if n < self.min_prefix:
            return []
        if (
            cached
            and len(cached) <= n
            and first[: len(cached)] == cached
            and len(cached) * 5 >= n * 4
        ):
            return cached  # reuse: a few extra shared tokens are not worth a new prefix pass
        try:
            self._build_prefix(first[:n])
        except Exception:
            self.prefix_cache = False  # an architecture whose cache we cannot share: plain batches
            self._prefix_ids, self._prefix_kv = [], None
            return []
        return self._prefix_ids

    def _build_prefix(self, ids: list[int]) -> None:
        import torch

        inp = torch.tensor([ids], dtype=torch.long, device=self.device)
        out = (
            self.model(input_ids=inp, use_cache=True, logits_to_keep=1)
            if self._keeps_logits
            else None
        )
        if out is None:
            base = (
                self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.model
            )
            out = base(input_ids=inp, use_cache=True)
        self._prefix_kv = _plain_layers(out.past_key_values)
        self._prefix_ids = list(ids)
        self._stats["prefix_builds"] += 1
        self._stats["tokens_computed"] += len(ids)

    def _expand_prefix(self, b: int) -> Any:
        from transformers import DynamicCache

        assert self._prefix_kv is not None
        # expand() is a view; the forward concatenates new keys into fresh tensors.
        data = [(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in self._prefix_kv]
        return DynamicCache(ddp_cache_data=data, config=self.model.config)

    def _gather_rows(self, past: tuple[Any, Any], rows: list[int]) -> tuple[Any, Any]:
        """The per-row KV cache and mask of a finished pass, picked (and repeated) by row."""
        import torch
        from transformers import DynamicCache

        cache, mask = past
        layers = _plain_layers(cache)
        idx = torch.tensor(rows, dtype=torch.long, device=mask.device)
        data = [(k.index_select(0, idx), v.index_select(0, idx)) for k, v in layers]
        return DynamicCache(ddp_cache_data=data, config=self.model.config), mask.index_select(
            0, idx
        )


def _plain_layers(cache: Any) -> list[tuple[Any, Any]]:
    """(keys, values) per layer of a plain dynamic cache; anything else cannot be shared."""
    layers = getattr(cache, "layers", None)
    if not layers or any(type(lay).__name__ != "DynamicLayer" for lay in layers):
        raise BackendError("prefix cache: only plain (non-sliding) dynamic caches are shared")
    return [(lay.keys, lay.values) for lay in layers]


def accepts_logits_to_keep(model: Any) -> bool:
    """True when the model's forward takes `logits_to_keep` (else the head is applied by hand)."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return "logits_to_keep" in params
