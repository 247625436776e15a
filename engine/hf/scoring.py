"""Scoring: next-token answer probabilities and log-likelihoods on the padded path (the tree path first)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

from llmscope.engine.answers import answer_ids
from llmscope.engine.backend import BackendError
from llmscope.engine.hf.jobs import Encoded, Job, loglik_out
from llmscope.engine.hf.tree import TreeMask
from llmscope.engine.types import LogLikOut, NextTokenOut, TopToken


class _Incompatible(Exception):
    """The model's KV cache cannot be gathered per row (e.g. sliding-window layers)."""


class Scoring(TreeMask):
    """Answer token ids, next-token probabilities and log-likelihoods of batches of jobs."""

    tree_mask: bool
    context_cache: bool
    _answer_cache: dict[tuple[str, ...], dict[str, list[int]]]
    _answer_index: dict[tuple[str, ...], tuple[Any, list[int]]]
    _vocab_text: list[str] | None

    def vocab_text(self) -> list[str]:
        """Each vocabulary id decoded on its own (cached)."""
        if self._vocab_text is None:
            n = len(self.tok)
            self._vocab_text = self.tok.batch_decode(
                [[i] for i in range(n)], skip_special_tokens=False
            )
        return self._vocab_text

    def answer_token_ids(self, answers: list[str]) -> dict[str, list[int]]:
        key = tuple(answers)
        if key not in self._answer_cache:
            special = set(self.tok.all_special_ids)
            vocab = ((i, t) for i, t in enumerate(self.vocab_text()) if i not in special)
            self._answer_cache[key] = answer_ids(vocab, answers)
        return self._answer_cache[key]

    def _answers_index(self, answers: list[str]) -> tuple[Any, list[int]]:
        """All answers' token ids in one tensor, and where each answer's run ends."""
        key = tuple(answers)
        idx = self._answer_index.get(key)
        if idx is None:
            import torch

            ids = self.answer_token_ids(answers)
            flat = [t for a in answers for t in ids[a]]
            ends = list(itertools.accumulate(len(ids[a]) for a in answers))
            idx = self._answer_index[key] = (torch.tensor(flat, dtype=torch.long), ends)
        return idx

    def _run_next(self, batch: list[Job]) -> list[NextTokenOut]:
        import torch

        logp = self._forward_last([j.payload[0].ids for j in batch], 1, [1] * len(batch))[:, -1, :]
        probs = logp.exp()
        # One top-k and one gather per batch, one device->host copy each.
        k = min(max(j.payload[2] for j in batch), probs.shape[-1])
        tv, ti = torch.topk(probs, k)
        top_v, top_i = tv.tolist(), ti.tolist()
        ans_p: list[list[float]] = [[] for _ in batch]
        by_answers: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for r, j in enumerate(batch):
            by_answers[tuple(j.payload[1])].append(r)
        for key, rows in by_answers.items():
            flat, ends = self._answers_index(list(key))
            if not ends or ends[-1] == 0:
                for r in rows:
                    ans_p[r] = [0.0] * len(key)
                continue
            sel = probs[torch.tensor(rows, device=probs.device)][:, flat.to(probs.device)]
            cum = torch.nn.functional.pad(sel.double().cumsum(-1), (1, 0))
            bounds = torch.tensor([0, *ends], device=probs.device)
            sums = (cum[:, bounds[1:]] - cum[:, bounds[:-1]]).tolist()
            for r, s in zip(rows, sums, strict=True):
                ans_p[r] = s
        vocab = self.vocab_text()
        outs = []
        for r, j in enumerate(batch):
            enc, answers, top_k = j.payload
            ids = self.answer_token_ids(answers)
            ans = {a: (float(v) if ids[a] else 0.0) for a, v in zip(answers, ans_p[r], strict=True)}
            top = [
                TopToken(
                    token=vocab[i] if i < len(vocab) else f"<id {i}>", id=int(i), prob=float(v)
                )
                for v, i in zip(top_v[r][:top_k], top_i[r][:top_k], strict=True)
            ]
            outs.append(
                NextTokenOut(
                    prompt=enc.text,
                    probs=ans,
                    other=1.0 - sum(ans.values()),
                    top=top,
                    n_tokens=len(enc.ids),
                    meta={"answer_token_counts": {a: len(v) for a, v in ids.items()}},
                )
            )
        return outs

    def _run_loglik(self, batch: list[Job]) -> list[LogLikOut]:
        if self.tree_mask:
            out = self._loglik_tree(batch)
            if out is not None:
                return out
        try:
            return self._loglik_batch(batch, self.context_cache)
        except _Incompatible:
            self.context_cache = False  # e.g. sliding-window layers: one row per option
            return self._loglik_batch(batch, False)

    def _loglik_batch(self, batch: list[Job], share: bool) -> list[LogLikOut]:
        """Score continuations. Pass 1: one row per context (its last position scores
        every option's first token); a context that is alone keeps its continuation in
        the row. Pass 2: the other tokens of multi-token options, as rows continuing
        their context's KV cache from pass 1, so a context runs once per item.
        """
        import torch

        encs: list[Encoded] = [j.payload for j in batch]
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for i, j in enumerate(batch):
            groups[j.ctx].append(i)
        seqs: list[list[int]] = []
        reserve: list[int] = []
        row1 = [0] * len(batch)  # pass-1 row of each job
        whole = [False] * len(batch)  # all of the job's tokens are read from pass 1
        second: list[int] = []  # jobs continued in pass 2
        for ctx, members in groups.items():
            multi = [i for i in members if encs[i].n_cont > 1]
            singles = [i for i in members if encs[i].n_cont == 1]
            if multi and (len(members) == 1 or not share):
                for i in multi:
                    seqs.append(encs[i].ids[:-1])
                    reserve.append(encs[i].n_cont)
                    row1[i], whole[i] = len(seqs) - 1, True
                multi = []
            if multi or singles:
                seqs.append(list(ctx))
                reserve.append(1)
                for i in multi + singles:
                    row1[i] = len(seqs) - 1
                second.extend(multi)
        keep1 = max(reserve)
        res = self._forward_last(seqs, keep1, reserve, want_cache=bool(second))
        logp1, past1 = res if second else (res, None)
        tl: list[list[float]] = [[] for _ in batch]
        greedy = [True] * len(batch)
        for i, e in enumerate(encs):
            n = e.n_cont if whole[i] else 1
            cont = e.ids[-e.n_cont :][:n]
            rows = logp1[row1[i], keep1 - n :, :]
            tl[i] = rows.gather(-1, torch.tensor(cont, device=rows.device)[:, None])[:, 0].tolist()
            greedy[i] = rows.argmax(-1).tolist() == cont
        if second:
            assert past1 is not None  # the forward returned its cache because `second` is non-empty
            try:
                past2 = self._gather_rows(past1, [row1[i] for i in second])
            except BackendError as err:
                raise _Incompatible from err
            reserve2 = [encs[i].n_cont - 1 for i in second]
            keep2 = max(reserve2)
            logp2 = self._forward_last(
                [encs[i].ids[-encs[i].n_cont : -1] for i in second], keep2, reserve2, past=past2
            )
            for r, i in enumerate(second):
                e = encs[i]
                cont = e.ids[-e.n_cont + 1 :]
                rows = logp2[r, keep2 - len(cont) :, :]
                tl[i] += rows.gather(-1, torch.tensor(cont, device=rows.device)[:, None])[
                    :, 0
                ].tolist()
                greedy[i] = greedy[i] and rows.argmax(-1).tolist() == cont
            self._stats["loglik_context_shared"] += len(second)
        self._stats["loglik_rows_saved"] += len(batch) - len(seqs)
        return [loglik_out(e, t, g) for e, t, g in zip(encs, tl, greedy, strict=True)]
