"""Local Hugging Face models (transformers/torch) behind one batching thread.

Async callers submit calls; a tokenising thread renders and tokenises them ahead of
the model, and a single worker thread drains the jobs, groups them by kind, sorts
them by token length (little padding), runs left-padded batches with explicit
position ids, and resolves the callers' futures. Logits are computed only at the
positions that are read (`logits_to_keep`, or the head applied to the selected
hidden states) and softmaxed in fp32. A token prefix shared by a whole batch (chat
system prompt, instructions, few-shot examples) is run once and its KV cache reused
across batches; the options of one context (an item's choices) are scored on top of
that context's KV cache, so the context runs once (`LLMSCOPE_PREFIX_CACHE=0` turns
both off). Padding sits between cached and new tokens and is masked; positions count
real tokens only.

The class is built in layers, each in its own module: `ForwardPasses` (forward.py),
`TreeMask` (tree.py), `Scoring` (scoring.py), `Generation` (generation.py) and `ModelThread`
(batching.py); loading.py loads the model and jobs.py holds the work passed between threads.
This module holds the constructor, the description, prompt rendering and tokenisation, the
public calls and the tokenising thread.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from collections import defaultdict
from typing import Any

from llmscope.engine.backend import Backend, BackendError, Capabilities, GenParams
from llmscope.engine.hf.batching import ModelThread
from llmscope.engine.hf.forward import accepts_logits_to_keep
from llmscope.engine.hf.jobs import Call, Encoded, Job, as_backend_error, settle
from llmscope.engine.hf.loading import default_threads, load_model, pick_device, pick_dtype
from llmscope.engine.models import ModelSpec, describe_source
from llmscope.engine.types import GenerateOut, LogLikOut, NextTokenOut


class HFBackend(ModelThread, Backend):
    """A local transformers model scored in batches by one worker thread.

    Requests are tokenised on a second thread ahead of the model, so the model thread
    does not wait on Python tokenisation in steady state. `threads` sets torch's
    intra-op threads of the model thread only, once when it starts (default: the physical
    cores the process may use, or `OMP_NUM_THREADS` when set). The tokeniser is single-threaded
    (`TOKENIZERS_PARALLELISM=false`), so it never adds a pool of its own.
    """

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
        threads: int | None = None,
        revision: str | None = None,
        trust_remote_code: bool = False,
        adapter: str | None = None,
        system_prompt: str | None = None,
        load_in_8bit: bool = False,
        load_in_4bit: bool = False,
    ) -> None:
        self.spec = spec
        self.model_args: dict[str, Any] = {
            k: v
            for k, v in {
                "revision": revision,
                "trust_remote_code": trust_remote_code,
                "adapter": adapter,
                "load_in_8bit": load_in_8bit,
                "load_in_4bit": load_in_4bit,
            }.items()
            if v
        }
        self.system_prompt = system_prompt or None
        self.device = pick_device(device)
        self.dtype = pick_dtype(self.device, dtype)
        self.batch_size = max(1, int(batch_size))
        # After an out-of-memory back-off the batch grows again (x1.5, up to this) once
        # `grow_after` full batches in a row succeeded; each relapse doubles `grow_after`.
        self.max_batch_size = self.batch_size
        self.grow_after = 8
        self._ok_streak = 0
        self._grown_since_oom = False
        self.threads = int(threads) if threads else None
        # Set once in the model thread; no per-call set_num_threads.
        self._torch_threads: int = self.threads or default_threads()
        self.sp_prefix = bool(sp_prefix)
        self._info: dict[str, Any] = {}
        if model is None or tokenizer is None:
            t0 = time.perf_counter()
            tokenizer, model, self._info = load_model(
                spec, self.device, self.dtype, self.model_args
            )
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
        self._answer_index: dict[tuple[str, ...], tuple[Any, list[int]]] = {}
        self._vocab_text: list[str] | None = None
        self._piece_text: dict[int, str] = {}
        self._space_piece_id: int | None = None
        if self.sp_prefix:
            self._space_piece_id = self._find_space_piece()
        self._keeps_logits = accepts_logits_to_keep(model)
        # Shared-prefix KV reuse (system prompt, instructions, few-shot examples), and
        # per-context reuse: the options of one item are scored on top of their context's KV.
        self.prefix_cache = os.environ.get("LLMSCOPE_PREFIX_CACHE", "1") != "0"
        self.context_cache = self.prefix_cache
        self.min_prefix = 8
        self._prefix_ids: list[int] = []
        self._prefix_kv: list[tuple[Any, Any]] | None = None
        self._stats: dict[str, Any] = defaultdict(float)
        self.tree_mask, self.scoring = self._choose_loglik_path()
        self._tok_queue: queue.Queue[tuple[str, Any, Call] | None] = queue.Queue()
        self._queue: queue.Queue[list[Job] | None] = queue.Queue()
        self._tok_thread = threading.Thread(
            target=self._tokeniser, name="llmscope-hf-tok", daemon=True
        )
        self._thread = threading.Thread(target=self._worker, name="llmscope-hf", daemon=True)
        self._closed = False
        self._tok_thread.start()
        self._thread.start()

    # -- description ---------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        """A local model answers everything from its own forward pass."""
        return Capabilities(
            next_token=True,
            exact_next_token=True,
            loglik=True,
            local_loglik=True,
            batched_prompts=True,
            generate=True,
            chat=self.has_chat,
            reasoning=False,
            prompt_logprobs=True,
            tokenizer=True,
        )

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
            "batch_size": self.max_batch_size,
            "threads": self.threads,
            "torch_threads": self._torch_threads,
            "chat_template": self.has_chat,
            "template_hash": _short_hash(getattr(self.tok, "chat_template", None) or ""),
            "sp_prefix": self.sp_prefix,
            "add_bos": self.add_bos,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "load": {k: v for k, v in self._info.items() if k != "revision"},
            "model_args": self.model_args,
            "system_prompt": self.system_prompt,
            "scoring": dict(self.scoring),
        }

    def stats(self) -> dict[str, Any]:
        return dict(self._stats)

    # -- text rendering ------------------------------------------------------------------
    def render(self, prompt: str, *, chat: bool = True) -> str:
        if chat and self.has_chat:
            system = (
                [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
            )
            return str(
                self.tok.apply_chat_template(
                    [*system, {"role": "user", "content": prompt}],
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

    def _piece(self, tid: int) -> str:
        text = self._piece_text.get(tid)
        if text is None:
            text = self._piece_text[tid] = self.tok.decode([tid])
        return text

    # -- public async API ----------------------------------------------------------------
    async def next_token(
        self, prompt: str, answers: list[str], *, chat: bool = True, top_k: int = 20
    ) -> NextTokenOut:
        out: NextTokenOut = await self._submit("next", (prompt, list(answers), chat, top_k), 1)
        return out

    async def loglik(
        self, requests: list[tuple[str, str]], *, chat: bool = False
    ) -> list[LogLikOut]:
        if not requests:
            return []
        out: list[LogLikOut] = await self._submit("loglik", (list(requests), chat), len(requests))
        return list(out)

    async def generate(self, prompt: str, params: GenParams, *, chat: bool = True) -> GenerateOut:
        out: GenerateOut = await self._submit("gen", (prompt, params, chat), 1)
        return out

    def _encode_pair(self, context: str, continuation: str, chat: bool) -> Encoded:
        """Tokenise context+continuation together; score the tokens after the context's own."""
        return self._encode_pairs([(context, continuation)], chat)[0]

    def _encode_pairs(self, requests: list[tuple[str, str]], chat: bool) -> list[Encoded]:
        """Tokenise (context, continuation) pairs; score the tokens after the context's own.

        Trailing spaces of the context move to the continuation (as lm-evaluation-harness
        does) so " Paris" is scored as one word token. An empty context is replaced by
        the BOS (or EOS) token so the first token of the continuation is scored too.
        Each distinct context is tokenised once, and all texts in one tokenizer call.
        """
        pairs: list[tuple[str, str]] = []
        for context, continuation in requests:
            if chat:
                context = self.render(context, chat=True)
            n_space = len(context) - len(context.rstrip(" "))
            if n_space and not chat:
                continuation = context[-n_space:] + continuation
                context = context[:-n_space]
            pairs.append((context, continuation))
        special = False if chat else self.add_bos
        contexts = list(dict.fromkeys(c for c, _ in pairs if c))
        texts = [c + x if c else x for c, x in pairs] + contexts
        flags = [bool(c) for c, _ in pairs]
        # Continuations of an empty context are tokenised without special tokens.
        enc_with = [t for t, f in zip(texts, flags + [True] * len(contexts), strict=True) if f]
        enc_without = [t for t, f in zip(texts, flags, strict=False) if not f]
        ids_with = iter(
            self.tok(enc_with, add_special_tokens=special).input_ids if enc_with else []
        )
        ids_without = iter(
            self.tok(enc_without, add_special_tokens=False).input_ids if enc_without else []
        )
        wholes = [list(next(ids_with) if f else next(ids_without)) for f in flags]
        ctx_len = {c: len(next(ids_with)) for c in contexts}
        bos = self.tok.bos_token_id
        out: list[Encoded] = []
        for (context, continuation), whole in zip(pairs, wholes, strict=True):
            if not context:
                prefix = bos if bos is not None else self.tok.eos_token_id
                ids = [prefix, *whole]
                n_cont = len(whole)
            else:
                n_cont = len(whole) - ctx_len[context]
                ids = whole
                if special and bos is not None and ids[0] != bos:
                    ids = [bos, *ids]
            if n_cont <= 0:
                raise BackendError(f"continuation {continuation!r} adds no tokens to its context")
            cont_tokens = [self._piece(t) for t in ids[-n_cont:]]
            out.append(Encoded(ids=ids, n_cont=n_cont, text=context, cont_tokens=cont_tokens))
        return out

    def _submit(self, kind: str, args: Any, n: int) -> asyncio.Future[Any]:
        if self._closed:
            raise BackendError("backend is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._tok_queue.put((kind, args, Call(fut, loop, n, single=kind != "loglik")))
        return fut

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._tok_queue.put(None)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._tok_thread.join, 30)
            await loop.run_in_executor(None, self._thread.join, 30)

    # -- tokenising thread ---------------------------------------------------------------
    def _tokeniser(self) -> None:
        """Turn calls into jobs ahead of the model thread (tokenisation is off its path)."""
        while True:
            item = self._tok_queue.get()
            if item is None:
                self._queue.put(None)
                return
            kind, args, call = item
            if call.future.cancelled():
                continue
            try:
                jobs = self._make_jobs(kind, args, call)
            except Exception as e:
                call.done = True
                settle(call, exc=e if isinstance(e, BackendError) else as_backend_error(e))
                continue
            self._queue.put(jobs)

    def _make_jobs(self, kind: str, args: Any, call: Call) -> list[Job]:
        if kind == "loglik":
            requests, chat = args
            encs = self._encode_pairs(requests, chat)
            for e in encs:
                self._check_length(len(e.ids))
            return [
                Job("loglik", e, call, i, len(e.ids), tuple(e.ids[: -e.n_cont]))
                for i, e in enumerate(encs)
            ]
        if kind == "next":
            prompt, answers, chat, top_k = args
            text = self.render(prompt, chat=chat)
            ids = self._encode_prompt(text, chat)
            if self._space_piece_id is not None:
                ids = [*ids, self._space_piece_id]
            self._check_length(len(ids))
            self._answers_index(answers)  # built here, outside the model thread's loop
            enc = Encoded(ids=ids, n_cont=0, text=text)
            return [Job("next", (enc, answers, top_k), call, 0, len(ids))]
        prompt, params, chat = args
        text = self.render(prompt, chat=chat)
        ids = self._encode_prompt(text, chat)
        self._check_length(len(ids))
        return [Job("gen", (ids, text, params), call, 0, len(ids))]

    def _check_length(self, n: int) -> None:
        if self.max_length and n > self.max_length:
            raise BackendError(f"prompt has {n} tokens; the model accepts {self.max_length}")


def _short_hash(s: str) -> str:
    import hashlib

    return hashlib.sha256(s.encode()).hexdigest()[:16]
