"""Tree attention mask: an item's options scored as branches after one copy of their context.

Log-likelihoods default to a tree attention mask: one row per context holds the context
once and every option's tokens as branches after it; a 4-D mask lets each option token
see the context and its own earlier tokens only, and position ids restart after the
context for each branch, so an item's options are scored in one forward pass. A probe at
load time checks the model honours such a mask (same log-probs as plain forwards);
otherwise, or with `LLMSCOPE_TREE_MASK=0`, the padded path (scoring.py) is used.
`describe()` records the path (`scoring`) and `stats()` counts tree batches and rows.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

from llmscope.engine.hf.forward import ForwardPasses
from llmscope.engine.hf.jobs import Encoded, Job, as_backend_error, loglik_out
from llmscope.engine.types import LogLikOut

# Attention implementations that add a custom 4-D float mask as given (flash kernels and
# flex attention take no such mask).
_TREE_ATTENTION = frozenset({"sdpa", "eager"})


class TreeMask(ForwardPasses):
    """Log-likelihoods through the tree mask, and the load-time check that the model honours it."""

    dtype: str
    batch_size: int
    TREE_ROW_TOKENS = 1024  # option tokens per tree row (see _tree_chunks)

    def _choose_loglik_path(self) -> tuple[bool, dict[str, Any]]:
        """Use the tree mask where the attention honours a custom 4-D mask; else the padded path.

        Checked, not assumed: a short probe scores two branches on one context through the
        tree mask and through plain forwards and compares the log-probs.
        """
        if os.environ.get("LLMSCOPE_TREE_MASK", "1") == "0":
            return False, {"loglik_path": "padded", "reason": "LLMSCOPE_TREE_MASK=0"}
        impl = getattr(self.model.config, "_attn_implementation", None) or "eager"
        if impl not in _TREE_ATTENTION:
            return False, {
                "loglik_path": "padded",
                "reason": f"attention {impl!r} takes no custom 4-D mask",
            }
        try:
            diff = self._probe_tree()
        except Exception as e:  # any architecture that refuses the mask: the padded path
            return False, {
                "loglik_path": "padded",
                "reason": f"tree-mask probe failed: {as_backend_error(e)}",
            }
        self._stats.clear()  # the probe's tokens are not the run's
        # Half precision rounds log-probs of ~-15 by ~0.06; a mask that is ignored moves them by nats.
        tol = 1e-3 if self.dtype == "float32" else 0.25
        if not diff <= tol:
            return False, {
                "loglik_path": "padded",
                "reason": f"tree-mask probe differs from plain forwards by {diff:.2g}",
            }
        return True, {"loglik_path": "tree", "probe_max_diff": float(f"{diff:.3g}")}

    def _probe_tree(self) -> float:
        """Largest |log-prob| difference between the tree path and plain forwards on toy ids."""
        import torch

        n_vocab = int(getattr(self.model.config, "vocab_size", 0) or len(self.tok))
        ids = [(17 * k + 3) % max(2, n_vocab - 1) + 1 for k in range(9)]
        ctx, a, b = ids[:5], ids[5:8], ids[8:]
        seq = ctx + a + b
        with torch.no_grad():
            keep = 1 + len(a) + len(b)
            logits, _ = self._forward_tree([seq], [len(ctx)], [[len(a), len(b)]], [keep], keep)
            tree = torch.log_softmax(logits[0].float(), -1)  # positions: context end, a, b
            worst = 0.0
            for start, branch in ((1, a), (1 + len(a), b)):
                full = torch.tensor([ctx + branch], device=self.device)
                ref = torch.log_softmax(self.model(input_ids=full).logits[0].float(), -1)
                got = torch.cat([tree[:1], tree[start : start + len(branch)]])
                want = ref[len(ctx) - 1 : len(ctx) + len(branch)]
                worst = max(worst, float((got - want).abs().max()))
        return worst

    def _tree_chunks(self, n_conts: list[int]) -> list[list[int]]:
        """Split one context's options (by index) into rows: at most `batch_size` options and
        `TREE_ROW_TOKENS` branch tokens per row (one longer option still gets a row), so the
        (row length)^2 mask stays small when thousands of sentences share a BOS context."""
        chunks: list[list[int]] = []
        cur: list[int] = []
        tokens = 0
        for i, n in enumerate(n_conts):
            if cur and (len(cur) >= self.batch_size or tokens + n - 1 > self.TREE_ROW_TOKENS):
                chunks.append(cur)
                cur, tokens = [], 0
            cur.append(i)
            tokens += n - 1
        if cur:
            chunks.append(cur)
        return chunks

    def _loglik_tree(self, batch: list[Job]) -> list[LogLikOut] | None:
        """All options of each context in one row; None when the batch must take the padded path."""
        import torch

        encs: list[Encoded] = [j.payload for j in batch]
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for i, j in enumerate(batch):
            groups[j.ctx].append(i)
        seqs: list[list[int]] = []
        ctx_lens: list[int] = []
        branches: list[list[int]] = []
        reserve: list[int] = []
        where: list[tuple[int, int]] = [(0, 0)] * len(
            batch
        )  # (row, branch start after the context)
        rows = [
            (ctx, [members[c] for c in chunk])
            for ctx, members in groups.items()
            for chunk in self._tree_chunks([encs[i].n_cont for i in members])
        ]
        for ctx, members in rows:
            seq = list(ctx)
            lens = []
            for i in members:
                tail = encs[i].ids[-encs[i].n_cont : -1]  # the last token is only predicted
                where[i] = (len(seqs), len(seq) - len(ctx))
                seq.extend(tail)
                if tail:
                    lens.append(len(tail))
            seqs.append(seq)
            ctx_lens.append(len(ctx))
            branches.append(lens)
            reserve.append(len(seq) - len(ctx) + 1)
        window = _sliding_window(self.model.config)
        if window is not None:
            # A custom mask replaces the sliding-window mask: exact only inside the window.
            longest = max(c + max(bl, default=0) for c, bl in zip(ctx_lens, branches, strict=True))
            if longest > window:
                self._stats["loglik_tree_skipped_window"] += 1
                return None
        keep = max(reserve)
        logits, n = self._forward_tree(seqs, ctx_lens, branches, reserve, keep)
        # Read each needed position once: an option's first token from its context's last
        # position (shared by every option of the context), the rest from its branch.
        pos_of: dict[tuple[int, int], int] = {}
        picks: list[list[int]] = []
        for i, e in enumerate(encs):
            r, start = where[i]
            first = keep - reserve[r]
            idx = [first] + [first + 1 + start + t for t in range(e.n_cont - 1)]
            picks.append([pos_of.setdefault((r, k), len(pos_of)) for k in idx])
        rows_t = torch.tensor([rk[0] for rk in pos_of], device=logits.device)
        cols_t = torch.tensor([rk[1] for rk in pos_of], device=logits.device)
        logp = torch.log_softmax(logits[rows_t, cols_t].float(), dim=-1)
        flat_pos = [p for pk in picks for p in pk]
        flat_tok = [t for e in encs for t in e.ids[-e.n_cont :]]
        pos_t = torch.tensor(flat_pos, device=logp.device)
        vals = logp[pos_t, torch.tensor(flat_tok, device=logp.device)].tolist()
        tops = logp[pos_t].argmax(-1).tolist()
        self._stats["loglik_tree_batches"] += 1
        self._stats["loglik_tree_rows"] += len(seqs)
        self._stats["loglik_rows_saved"] += len(batch) - len(seqs)
        out = []
        k = 0
        for e in encs:
            t = vals[k : k + e.n_cont]
            greedy = tops[k : k + e.n_cont] == flat_tok[k : k + e.n_cont]
            k += e.n_cont
            out.append(loglik_out(e, t, greedy))
        return out

    def _forward_tree(
        self,
        seqs: list[list[int]],
        ctx_lens: list[int],
        branches: list[list[int]],
        reserve: list[int],
        keep: int,
    ) -> tuple[Any, int]:
        """Left-padded forward of tree rows (context, then branches); logits of the last `keep`
        positions and the padded row length.

        Row r is `ctx_lens[r]` context tokens followed by branches of `branches[r]` tokens.
        A prefix common to every row's context runs once from the shared-prefix KV cache.
        """
        import torch

        b = len(seqs)
        prefix = self._pick_prefix(seqs, reserve)
        p = len(prefix)
        sufs = [s[p:] for s in seqs]
        n = max(len(s) for s in sufs)
        seg = torch.full((b, n), -1, dtype=torch.long)  # -1 padding, 0 context, k branch k
        pos = torch.zeros((b, n), dtype=torch.long)
        input_ids = torch.full((b, n), self.tok.pad_token_id, dtype=torch.long)
        for r, s in enumerate(sufs):
            o = n - len(s)
            input_ids[r, o:] = torch.tensor(s, dtype=torch.long)
            lc = ctx_lens[r] - p
            seg[r, o : o + lc] = 0
            pos[r, o : o + lc] = torch.arange(p, p + lc)
            at = o + lc
            for k, m in enumerate(branches[r], 1):
                seg[r, at : at + m] = k
                pos[r, at : at + m] = torch.arange(p + lc, p + lc + m)  # each branch restarts
                at += m
        real = seg >= 0
        sq, sk = seg[:, :, None], seg[:, None, :]
        allowed = (
            torch.ones((n, n), dtype=torch.bool).tril()
            & real[:, :, None]
            & real[:, None, :]
            & ((sk == 0) | (sk == sq))
        )
        allowed |= torch.eye(n, dtype=torch.bool)  # padding rows attend to themselves (no NaN)
        if p:
            allowed = torch.cat([real[:, :, None].expand(b, n, p), allowed], dim=2)
        tdtype = getattr(torch, self.dtype)
        mask = torch.zeros(allowed.shape, dtype=tdtype).masked_fill_(
            ~allowed, torch.finfo(tdtype).min
        )
        kwargs: dict[str, Any] = {
            "attention_mask": mask[:, None].to(self.device),
            "position_ids": pos.to(self.device),
            "use_cache": bool(p),
        }
        if p:
            kwargs["past_key_values"] = self._expand_prefix(b)
        n_real = sum(len(s) for s in sufs)
        self._stats["tokens_computed"] += n_real
        self._stats["tokens_padding"] += b * n - n_real
        self._stats["tokens_prefix_reused"] += b * p
        logits, _ = self._logits(input_ids.to(self.device), keep, kwargs)
        return logits, n


def _sliding_window(config: Any) -> int | None:
    """The sliding window of a model that has sliding-window layers, else None."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    if getattr(config, "use_sliding_window", True) is False:
        return None
    types = getattr(config, "layer_types", None)
    if types is not None and not any("sliding" in str(t) for t in types):
        return None
    return int(window)
