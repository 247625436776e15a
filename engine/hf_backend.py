"""Local Hugging Face models (transformers/torch) behind one batching thread.

Async callers submit jobs; a single worker thread drains the queue, groups jobs
of one kind, sorts them by token length (little padding), runs left-padded
batches with explicit position ids, and resolves the callers' futures. Logits
are computed only at the positions that are read (`logits_to_keep`, or the head
applied to the selected hidden states) and softmaxed in fp32. A token prefix
shared by a whole batch (chat system prompt, instructions, few-shot examples) is
run once and its KV cache reused across batches (`LLMSCOPE_PREFIX_CACHE=0` turns
this off); padding sits between prefix and suffix and is masked, positions count
real tokens only.
"""

from __future__ import annotations

import asyncio
import math
import os
import queue
import shutil
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmscope.engine.answers import answer_ids
from llmscope.engine.backend import Backend, BackendError, GenParams
from llmscope.engine.models import ModelSpec, cache_dir, describe_source, file_sha256
from llmscope.engine.types import GenerateOut, LogLikOut, NextTokenOut, TopToken

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pick_device(device: str = "auto") -> str:
    import torch

    if device != "auto":
        return device
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def pick_dtype(device: str, dtype: str = "auto") -> str:
    if dtype != "auto":
        return dtype
    return "bfloat16" if device.startswith("cuda") else "float32"


def _gguf_cache_path(spec: ModelSpec) -> Path:
    f = Path(spec.path or ".") / (spec.gguf_file or "")
    return cache_dir() / "gguf" / file_sha256(f)[:20]


def load_model(spec: ModelSpec, device: str, dtype: str) -> tuple[Any, Any, dict[str, Any]]:
    """Load tokenizer and model; GGUF files are converted once and cached as safetensors."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tdtype = getattr(torch, dtype)
    info: dict[str, Any] = {}
    if spec.gguf_file:
        cached = _gguf_cache_path(spec)
        if (cached / "llmscope-ok").is_file():
            tok = AutoTokenizer.from_pretrained(cached)
            model = AutoModelForCausalLM.from_pretrained(cached, dtype=tdtype)
            info["gguf_cache"] = str(cached)
        else:
            tok = AutoTokenizer.from_pretrained(spec.path, gguf_file=spec.gguf_file)
            model = AutoModelForCausalLM.from_pretrained(
                spec.path, gguf_file=spec.gguf_file, dtype=tdtype
            )
            info["gguf_cache"] = _save_gguf_cache(model, tok, cached)
    else:
        tok = AutoTokenizer.from_pretrained(spec.path)
        model = AutoModelForCausalLM.from_pretrained(spec.path, dtype=tdtype)
        rev = getattr(model.config, "_commit_hash", None)
        if rev:
            info["revision"] = rev
    model.to(device)
    model.eval()
    return tok, model, info


def _save_gguf_cache(model: Any, tok: Any, target: Path) -> str | None:
    """Save a de-quantised copy; on any failure the next load simply converts again."""
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    try:
        # The GGUF quantizer marks the model unserialisable; the weights are plain tensors now.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        tmp.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "llmscope-ok").write_text("converted from GGUF by llmscope\n")
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        return str(target)
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        return None


@dataclass
class _Job:
    kind: str  # "next" | "loglik" | "gen"
    payload: Any
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    length: int = 0


@dataclass
class _Encoded:
    ids: list[int]
    n_cont: int  # number of scored (continuation) tokens at the end; 0 for next-token jobs
    text: str
    cont_tokens: list[str] = field(default_factory=list)


class HFBackend(Backend):
    """A local transformers model scored in batches by one worker thread."""

    kind = "hf"

    def __init__(
        self,
        spec: ModelSpec,
        *,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 16,
        sp_prefix: bool = False,
        add_bos: str | bool = "auto",
        max_length: int | None = None,
        model: Any = None,
        tokenizer: Any = None,
    ) -> None:
        self.spec = spec
        self.device = pick_device(device)
        self.dtype = pick_dtype(self.device, dtype)
        self.batch_size = max(1, int(batch_size))
        self.sp_prefix = bool(sp_prefix)
        self._info: dict[str, Any] = {}
        if model is None or tokenizer is None:
            t0 = time.perf_counter()
            tokenizer, model, self._info = load_model(spec, self.device, self.dtype)
            self._info["load_seconds"] = round(time.perf_counter() - t0, 2)
        else:
            import torch

            model.to(self.device).to(getattr(torch, self.dtype)).eval()
        self.tok = tokenizer
        self.model = model
        if self.tok.pad_token_id is None:
            self.tok.pad_token = self.tok.eos_token
        self.has_chat = bool(getattr(self.tok, "chat_template", None))
        if add_bos == "auto":
            probe = self.tok("a", add_special_tokens=True).input_ids
            add_bos = bool(
                self.tok.bos_token_id is not None and probe and probe[0] == self.tok.bos_token_id
            )
        self.add_bos = bool(add_bos)
        self.max_length = (
            max_length or int(getattr(model.config, "max_position_embeddings", 0) or 0) or None
        )
        self._answer_cache: dict[tuple[str, ...], dict[str, list[int]]] = {}
        self._vocab_text: list[str] | None = None
        self._space_piece_id: int | None = None
        if self.sp_prefix:
            self._space_piece_id = self._find_space_piece()
        self._keeps_logits = _accepts_logits_to_keep(model)
        # Shared-prefix KV reuse (system prompt, instructions, few-shot examples).
        self.prefix_cache = os.environ.get("LLMSCOPE_PREFIX_CACHE", "1") != "0"
        self.min_prefix = 8
        self._prefix_ids: list[int] = []
        self._prefix_kv: list[tuple[Any, Any]] | None = None
        self._stats: dict[str, Any] = defaultdict(float)
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._worker, name="llmscope-hf", daemon=True)
        self._closed = False
        self._thread.start()

    # -- description ---------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        import torch
        import transformers

        src = describe_source(self.spec)
        if self._info.get("revision") and not src.get("model_hash"):
            src["model_hash"] = "revision:" + self._info["revision"]
        return {
            "backend": "hf",
            "model": self.spec.display(),
            "model_path": src["model_path"],
            "model_hash": src["model_hash"],
            "dtype": self.dtype,
            "device": self.device,
            "batch_size": self.batch_size,
            "chat_template": self.has_chat,
            "template_hash": _short_hash(getattr(self.tok, "chat_template", None) or ""),
            "sp_prefix": self.sp_prefix,
            "add_bos": self.add_bos,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "load": {k: v for k, v in self._info.items() if k != "revision"},
        }

    def stats(self) -> dict[str, Any]:
        return dict(self._stats)

    # -- text rendering ------------------------------------------------------------------
    def render(self, prompt: str, *, chat: bool = True) -> str:
        if chat and self.has_chat:
            return str(
                self.tok.apply_chat_template(
                    [{"role": "user", "content": prompt}],
                    add_generation_prompt=True,
                    tokenize=False,
                )
            )
        return prompt

    def _encode_prompt(self, text: str, chat: bool) -> list[int]:
        # A rendered chat template already carries its special tokens.
        special = False if (chat and self.has_chat) else self.add_bos
        ids = list(self.tok(text, add_special_tokens=special).input_ids)
        if (
            special
            and self.tok.bos_token_id is not None
            and (not ids or ids[0] != self.tok.bos_token_id)
        ):
            ids = [self.tok.bos_token_id, *ids]
        return ids

    def _find_space_piece(self) -> int:
        for piece in ("\u2581", " "):
            tid = self.tok.convert_tokens_to_ids(piece)
            if isinstance(tid, int) and tid != self.tok.unk_token_id and tid is not None:
                return tid
        raise BackendError("sp_prefix: this tokenizer has no bare word-boundary piece ('\u2581')")

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

    # -- public async API ----------------------------------------------------------------
    async def next_token(
        self, prompt: str, answers: list[str], *, chat: bool = True, top_k: int = 20
    ) -> NextTokenOut:
        text = self.render(prompt, chat=chat)
        ids = self._encode_prompt(text, chat)
        if self._space_piece_id is not None:
            ids = [*ids, self._space_piece_id]
        self.answer_token_ids(answers)  # build the id sets outside the worker's hot loop
        enc = _Encoded(ids=ids, n_cont=0, text=text)
        out: NextTokenOut = await self._submit("next", (enc, list(answers), top_k), len(ids))
        return out

    async def loglik(
        self, requests: list[tuple[str, str]], *, chat: bool = False
    ) -> list[LogLikOut]:
        encs = [self._encode_pair(c, x, chat) for c, x in requests]
        futs = [self._submit("loglik", e, len(e.ids)) for e in encs]
        return list(await asyncio.gather(*futs))

    async def generate(self, prompt: str, params: GenParams, *, chat: bool = True) -> GenerateOut:
        text = self.render(prompt, chat=chat)
        ids = self._encode_prompt(text, chat)
        out: GenerateOut = await self._submit("gen", (ids, text, params), len(ids))
        return out

    def _encode_pair(self, context: str, continuation: str, chat: bool) -> _Encoded:
        """Tokenise context+continuation together; score the tokens after the context's own.

        Trailing spaces of the context move to the continuation (as lm-evaluation-harness
        does) so " Paris" is scored as one word token. An empty context is replaced by
        the BOS (or EOS) token so the first token of the continuation is scored too.
        """
        if chat:
            context = self.render(context, chat=True)
        n_space = len(context) - len(context.rstrip(" "))
        if n_space and not chat:
            continuation = context[-n_space:] + continuation
            context = context[:-n_space]
        if not context:
            prefix = (
                self.tok.bos_token_id
                if self.tok.bos_token_id is not None
                else self.tok.eos_token_id
            )
            cont_ids = list(self.tok(continuation, add_special_tokens=False).input_ids)
            ids = [prefix, *cont_ids]
            n_cont = len(cont_ids)
        else:
            special = False if chat else self.add_bos
            whole = list(self.tok(context + continuation, add_special_tokens=special).input_ids)
            ctx = list(self.tok(context, add_special_tokens=special).input_ids)
            n_cont = len(whole) - len(ctx)
            ids = whole
            if special and self.tok.bos_token_id is not None and ids[0] != self.tok.bos_token_id:
                ids = [self.tok.bos_token_id, *ids]
        if n_cont <= 0:
            raise BackendError(f"continuation {continuation!r} adds no tokens to its context")
        cont_tokens = [self.tok.decode([t]) for t in ids[-n_cont:]]
        return _Encoded(ids=ids, n_cont=n_cont, text=context, cont_tokens=cont_tokens)

    def _submit(self, kind: str, payload: Any, length: int) -> asyncio.Future[Any]:
        if self._closed:
            raise BackendError("backend is closed")
        if self.max_length and length > self.max_length:
            raise BackendError(f"prompt has {length} tokens; the model accepts {self.max_length}")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._queue.put(_Job(kind, payload, fut, loop, length))
        return fut

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 30)

    # -- worker thread -------------------------------------------------------------------
    def _worker(self) -> None:
        import torch

        torch.set_grad_enabled(False)
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs = [job]
            # Drain what is already waiting so neighbours in length share a batch.
            deadline = time.perf_counter() + 0.002
            while len(jobs) < self.batch_size * 8:
                try:
                    nxt = self._queue.get(timeout=max(0.0, deadline - time.perf_counter()))
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                jobs.append(nxt)
            by_kind: dict[str, list[_Job]] = defaultdict(list)
            for j in jobs:
                if not j.future.cancelled():
                    by_kind[j.kind].append(j)
            for kind, group in by_kind.items():
                group.sort(key=lambda j: -j.length)
                if kind == "gen":
                    for j in group:
                        self._run_safely([j], self._run_generate)
                    continue
                runner = self._run_next if kind == "next" else self._run_loglik
                i = 0
                while i < len(group):
                    size = self.batch_size
                    batch = group[i : i + size]
                    done = self._run_with_backoff(batch, runner)
                    i += done

    def _run_with_backoff(self, batch: list[_Job], runner: Any) -> int:
        """Run a batch; on out-of-memory halve it and retry (no job is lost)."""
        import torch

        while True:
            try:
                t0 = time.perf_counter()
                results = runner(batch)
                dt = time.perf_counter() - t0
                self._stats["forward_seconds"] += dt
                self._stats["batches"] += 1
                self._stats["tokens"] += sum(j.length for j in batch)
                for j, r in zip(batch, results, strict=True):
                    _resolve(j, r)
                return len(batch)
            except torch.OutOfMemoryError:
                if len(batch) == 1:
                    _fail(batch[0], BackendError("out of memory even with batch size 1"))
                    return 1
                if self.device.startswith("cuda"):
                    torch.cuda.empty_cache()
                self.batch_size = max(1, len(batch) // 2)
                self._stats["oom_backoffs"] += 1
                batch = batch[: self.batch_size]
            except Exception as e:  # one bad batch must not kill the worker; items get the error
                if len(batch) == 1:
                    _fail(
                        batch[0],
                        e
                        if isinstance(e, BackendError)
                        else BackendError(f"{type(e).__name__}: {e}"),
                    )
                    return 1
                # retry one by one so only the offending item fails
                for j in batch:
                    self._run_safely([j], runner)
                return len(batch)

    def _run_safely(self, batch: list[_Job], runner: Any) -> None:
        try:
            for j, r in zip(batch, runner(batch), strict=True):
                _resolve(j, r)
        except Exception as e:
            for j in batch:
                _fail(
                    j,
                    e if isinstance(e, BackendError) else BackendError(f"{type(e).__name__}: {e}"),
                )

    def _forward_last(
        self, seqs: list[list[int]], keep: int, reserve: list[int] | None = None
    ) -> Any:
        """Left-padded forward pass; returns fp32 log-softmax of the last `keep` positions.

        `reserve[r]` is how many trailing tokens of row r are read (they must follow any
        shared prefix). A prefix common to every row is run once and its KV cache reused.
        """
        import torch

        reserve = reserve or [keep] * len(seqs)
        prefix = self._pick_prefix(seqs, reserve)
        p = len(prefix)
        sufs = [s[p:] for s in seqs]
        n = max(len(s) for s in sufs)
        pad = self.tok.pad_token_id
        b = len(seqs)
        input_ids = torch.full((b, n), pad, dtype=torch.long)
        mask = torch.zeros((b, p + n), dtype=torch.long)
        mask[:, :p] = 1
        for r, s in enumerate(sufs):
            input_ids[r, n - len(s) :] = torch.tensor(s, dtype=torch.long)
            mask[r, p + n - len(s) :] = 1
        # Positions count real tokens only, so padding between prefix and suffix is invisible.
        pos = (mask.cumsum(-1) - 1).clamp(min=0)[:, p:]
        input_ids, mask, pos = (t.to(self.device) for t in (input_ids, mask, pos))
        kwargs: dict[str, Any] = {"attention_mask": mask, "position_ids": pos}
        if p:
            kwargs["past_key_values"] = self._expand_prefix(b)
            kwargs["use_cache"] = True
        else:
            kwargs["use_cache"] = False
        self._stats["tokens_computed"] += sum(len(s) for s in sufs)
        self._stats["tokens_prefix_reused"] += p * b
        logits = self._logits(input_ids, keep, kwargs)
        return torch.log_softmax(logits.float(), dim=-1)

    def _logits(self, input_ids: Any, keep: int, kwargs: dict[str, Any]) -> Any:
        """Logits of the last `keep` positions only: the LM head never sees other positions."""
        if self._keeps_logits:
            out = self.model(input_ids=input_ids, logits_to_keep=keep, **kwargs)
            return out.logits[:, -keep:, :]
        base = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.model
        hidden = base(input_ids=input_ids, **kwargs).last_hidden_state[:, -keep:, :]
        return self.model.get_output_embeddings()(hidden)

    # -- shared-prefix KV cache ----------------------------------------------------------
    def _pick_prefix(self, seqs: list[list[int]], reserve: list[int]) -> list[int]:
        """The prefix to run once: the batch's common prefix, or the cached one if nearly as long."""
        if not self.prefix_cache or len(seqs) < 2:
            return []
        limit = min(len(s) - k for s, k in zip(seqs, reserve, strict=True))
        first = seqs[0]
        n = 0
        while n < limit and all(len(s) > n and s[n] == first[n] for s in seqs):
            n += 1
        if n < self.min_prefix:
            return []
        cached = self._prefix_ids
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
        cache = out.past_key_values
        layers = getattr(cache, "layers", None)
        if not layers or any(type(lay).__name__ != "DynamicLayer" for lay in layers):
            raise BackendError("prefix cache: only plain (non-sliding) dynamic caches are shared")
        self._prefix_kv = [(lay.keys, lay.values) for lay in layers]
        self._prefix_ids = list(ids)
        self._stats["prefix_builds"] += 1
        self._stats["tokens_computed"] += len(ids)

    def _expand_prefix(self, b: int) -> Any:
        from transformers import DynamicCache

        assert self._prefix_kv is not None
        # expand() is a view; the forward concatenates new keys into fresh tensors.
        data = [(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in self._prefix_kv]
        return DynamicCache(ddp_cache_data=data, config=self.model.config)

    def _run_next(self, batch: list[_Job]) -> list[NextTokenOut]:
        import torch

        logp = self._forward_last([j.payload[0].ids for j in batch], 1, [1] * len(batch))[:, -1, :]
        probs = logp.exp()
        outs = []
        for r, j in enumerate(batch):
            enc, answers, top_k = j.payload
            ids = self.answer_token_ids(answers)
            p = probs[r]
            ans = {
                a: float(p[torch.tensor(v, dtype=torch.long, device=p.device)].sum()) if v else 0.0
                for a, v in ids.items()
            }
            other = 1.0 - sum(ans.values())
            k = min(top_k, p.shape[-1])
            tv, ti = torch.topk(p, k)
            vocab = self.vocab_text()
            top = [
                TopToken(
                    token=vocab[i] if i < len(vocab) else f"<id {i}>", id=int(i), prob=float(v)
                )
                for v, i in zip(tv.tolist(), ti.tolist(), strict=True)
            ]
            outs.append(
                NextTokenOut(
                    prompt=enc.text,
                    probs=ans,
                    other=other,
                    top=top,
                    n_tokens=len(enc.ids),
                    meta={"answer_token_counts": {a: len(v) for a, v in ids.items()}},
                )
            )
        return outs

    def _run_loglik(self, batch: list[_Job]) -> list[LogLikOut]:
        encs: list[_Encoded] = [j.payload for j in batch]
        # Jobs whose continuation is one token and that share a context need one sequence.
        groups: dict[tuple[int, ...], int] = {}
        seqs: list[list[int]] = []
        reserve: list[int] = []
        row_of: list[int] = []
        for e in encs:
            if e.n_cont == 1:
                key = tuple(e.ids[:-1])
                if key in groups:
                    row_of.append(groups[key])
                    continue
                groups[key] = len(seqs)
            seqs.append(e.ids[:-1])
            reserve.append(e.n_cont)
            row_of.append(len(seqs) - 1)
        keep = max(e.n_cont for e in encs)
        logp = self._forward_last(seqs, keep, reserve)
        import torch

        outs = []
        for e, r in zip(encs, row_of, strict=True):
            cont = e.ids[-e.n_cont :]
            rows = logp[r, keep - e.n_cont :, :]
            tl = (
                rows.gather(-1, torch.tensor(cont, device=rows.device).unsqueeze(-1))
                .squeeze(-1)
                .tolist()
            )
            outs.append(
                LogLikOut(
                    logprob=float(math.fsum(tl)),
                    n_tokens=e.n_cont,
                    token_logprobs=tl,
                    tokens=e.cont_tokens,
                    n_context_tokens=len(e.ids) - e.n_cont,
                )
            )
        self._stats["loglik_rows_saved"] += len(encs) - len(seqs)
        return outs

    def _run_generate(self, batch: list[_Job]) -> list[GenerateOut]:
        import torch

        (ids, text, params) = batch[0].payload
        if params.seed is not None:
            torch.manual_seed(int(params.seed))
        inp = torch.tensor([ids], device=self.device)
        do_sample = params.temperature > 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": params.max_new_tokens,
            "do_sample": do_sample,
            "num_return_sequences": params.n,
            "pad_token_id": self.tok.pad_token_id,
        }
        if do_sample:
            kwargs.update(temperature=params.temperature, top_p=params.top_p)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=self.tok)
        out = self.model.generate(inp, attention_mask=torch.ones_like(inp), **kwargs)
        texts = []
        for row in out:
            t = self.tok.decode(row[len(ids) :], skip_special_tokens=True)
            texts.append(t)
        return [
            GenerateOut(texts=texts, prompt=text, n_tokens=len(ids), meta={"do_sample": do_sample})
        ]


def _resolve(job: _Job, value: Any) -> None:
    def _set() -> None:
        if not job.future.done():
            job.future.set_result(value)

    job.loop.call_soon_threadsafe(_set)


def _fail(job: _Job, exc: BaseException) -> None:
    def _set() -> None:
        if not job.future.done():
            job.future.set_exception(exc)

    job.loop.call_soon_threadsafe(_set)


def _accepts_logits_to_keep(model: Any) -> bool:
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return "logits_to_keep" in params


def _short_hash(s: str) -> str:
    import hashlib

    return hashlib.sha256(s.encode()).hexdigest()[:16]
