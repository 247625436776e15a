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

Log-likelihoods default to a tree attention mask: one row per context holds the context
once and every option's tokens as branches after it; a 4-D mask lets each option token
see the context and its own earlier tokens only, and position ids restart after the
context for each branch, so an item's options are scored in one forward pass. A probe at
load time checks the model honours such a mask (same log-probs as plain forwards);
otherwise, or with `LLMSCOPE_TREE_MASK=0`, the padded path above is used. `describe()`
records the path (`scoring`) and `stats()` counts tree batches and rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import math
import os
import queue
import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmscope.engine.answers import answer_ids
from llmscope.engine.backend import Backend, BackendError, Capabilities, GenParams
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


def physical_cores() -> int:
    """Physical cores this process may use: its CPU affinity with SMT siblings counted once,
    capped by a cgroup CPU quota (torch's own default sees every core of the host)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = list(range(os.cpu_count() or 1))
    cores = set()
    for c in cpus:
        try:
            cores.add(Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list").read_text().strip())
        except OSError:
            cores.add(str(c))
    n = max(1, len(cores))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return n


def default_threads() -> int:
    """Torch threads when none are given: `OMP_NUM_THREADS` if set, else `physical_cores()`."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return physical_cores()


def pick_dtype(device: str, dtype: str = "auto") -> str:
    if dtype != "auto":
        return dtype
    return "bfloat16" if device.startswith("cuda") else "float32"


def _gguf_cache_path(spec: ModelSpec) -> Path:
    f = Path(spec.path or ".") / (spec.gguf_file or "")
    return cache_dir() / "gguf" / file_sha256(f)[:20]


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Let transformers parse a GGUF file's metadata once per load instead of three times.

    A `gguf_file=` load reads the file for the tokenizer, the config and the weights, each
    through a new `gguf.GGUFReader` (transformers' `load_gguf_checkpoint` imports the class
    from the module at call time); for Gemma-3's 262k-token vocabulary that is ~45 of the ~77
    CPU s of a first conversion. The reader (read-only, memory-mapped) is memoised for the
    duration of this load only; were transformers to stop looking the class up there, this
    is a no-op and the load just takes longer.
    """
    try:
        import gguf
    except ImportError:  # transformers says what is missing when it needs it
        yield
        return
    orig = gguf.GGUFReader
    gguf.GGUFReader = functools.lru_cache(maxsize=4)(orig)  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        gguf.GGUFReader = orig  # type: ignore[misc]


# Models kept loaded inside `keep_loaded()` (a study's cells on one model: llmscope/study_run.py).
_KEPT: dict[str, tuple[Any, Any, dict[str, Any]]] | None = None


@contextlib.contextmanager
def keep_loaded() -> Iterator[None]:
    """Within the block, a model loaded again with the same arguments reuses the loaded weights
    (recorded as `load.reused` in the run's backend description); they are freed after it."""
    global _KEPT
    outer, _KEPT = _KEPT, ({} if _KEPT is None else _KEPT)
    try:
        yield
    finally:
        _KEPT = outer


def load_model(
    spec: ModelSpec, device: str, dtype: str, model_args: dict[str, Any] | None = None
) -> tuple[Any, Any, dict[str, Any]]:
    """Load tokenizer and model; GGUF files are converted once and cached as safetensors.

    `model_args` (engine/config.py): revision, trust_remote_code, adapter (PEFT folder or
    hub id), load_in_8bit / load_in_4bit (bitsandbytes, CUDA only).
    """
    if _KEPT is None:
        return _load_model(spec, device, dtype, model_args)
    key = repr((spec.path, spec.gguf_file, device, dtype, sorted((model_args or {}).items())))
    if key not in _KEPT:
        _KEPT.clear()  # one model held at a time: the study runs a model's cells together
        _KEPT[key] = _load_model(spec, device, dtype, model_args)
        return _KEPT[key][0], _KEPT[key][1], dict(_KEPT[key][2])
    tok, model, info = _KEPT[key]
    return tok, model, {**info, "reused": True}


def _load_model(
    spec: ModelSpec, device: str, dtype: str, model_args: dict[str, Any] | None = None
) -> tuple[Any, Any, dict[str, Any]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tdtype = getattr(torch, dtype)
    info: dict[str, Any] = {}
    margs = model_args or {}
    hub_kw: dict[str, Any] = {}
    if margs.get("revision"):
        hub_kw["revision"] = margs["revision"]
    if margs.get("trust_remote_code"):
        hub_kw["trust_remote_code"] = True
    quant_kw: dict[str, Any] = {}
    if margs.get("load_in_8bit") or margs.get("load_in_4bit"):
        from transformers import BitsAndBytesConfig

        quant_kw["quantization_config"] = BitsAndBytesConfig(
            load_in_8bit=bool(margs.get("load_in_8bit")), load_in_4bit=bool(margs.get("load_in_4bit"))
        )
        quant_kw["device_map"] = device
    if spec.gguf_file:
        cached = _gguf_cache_path(spec)
        if (cached / "llmscope-ok").is_file():
            tok = AutoTokenizer.from_pretrained(cached)
            model = AutoModelForCausalLM.from_pretrained(cached, dtype=tdtype)
            info["gguf_cache"] = str(cached)
        else:
            with _gguf_parsed_once():
                tok = AutoTokenizer.from_pretrained(spec.path, gguf_file=spec.gguf_file)
                model = AutoModelForCausalLM.from_pretrained(
                    spec.path, gguf_file=spec.gguf_file, dtype=tdtype
                )
            info["gguf_cache"] = _save_gguf_cache(model, tok, cached)
    else:
        source = _hub_source(spec.path, hub_kw.get("revision"), info)
        if source != spec.path:  # the cached snapshot's folder: its commit is the revision
            hub_kw.pop("revision", None)
        tok = AutoTokenizer.from_pretrained(source, **hub_kw)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=tdtype, **hub_kw, **quant_kw)
        rev = info.get("revision") or getattr(model.config, "_commit_hash", None)
        if rev:
            info["revision"] = rev
    if margs.get("adapter"):
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, margs["adapter"])  # type: ignore[assignment]
        info["adapter"] = margs["adapter"]
    if not quant_kw:  # a quantised model is placed by device_map and cannot be moved
        model.to(device)  # type: ignore[arg-type]  # transformers' stub wants a model; a device string is valid
    model.eval()
    return tok, model, info


@functools.lru_cache(maxsize=1)
def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hugging Face hub cannot be reached now, or None when it can.

    One quick connection (DNS and TCP, `timeout` seconds): offline, huggingface_hub retries
    each file five times with back-off, about a minute before its error."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        return f"{host}: {getattr(e, 'strerror', None) or e}"
    return None


def _hub_source(repo: str, revision: str | None, info: dict[str, Any]) -> str:
    """Where to load `repo` from: itself, or, when the hub cannot be reached, the cached
    snapshot's folder (said in the run's load info; its commit is the run's revision). A hub id
    that is not cached then fails at once.

    The folder, not `local_files_only`: transformers' adapter lookup asks the hub regardless."""
    if Path(repo).exists() or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return repo  # a local folder, or the user switched the hub off (then only the cache is read)
    why = hub_unreachable()
    if why is None:
        return repo
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(repo, "config.json", revision=revision)
    except ValueError:  # not a valid repo id
        cached = None
    if isinstance(cached, str):
        snapshot = Path(cached).parent
        info["hub"] = f"unreachable ({why}): the cached copy was loaded"
        info["revision"] = snapshot.name
        return str(snapshot)
    raise OSError(
        f"the Hugging Face hub cannot be reached ({why}) and {repo!r} is not in its cache "
        f"({os.environ.get('HF_HOME') or '~/.cache/huggingface'})"
    )


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
        if (target / "llmscope-ok").is_file():
            # Another process finished first and may be loading it: keep its copy.
            shutil.rmtree(tmp, ignore_errors=True)
            return str(target)
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        return str(target)
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        return None


@dataclass
class _Call:
    """One API call: its future resolves once every part has a result, or at the first error.

    Only the worker (or, for encoding errors, the tokenising thread before any part is
    queued) touches `results`/`remaining`, so no lock is needed.
    """

    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    n: int
    single: bool  # resolve to the one result instead of a list
    results: list[Any] = field(default_factory=list)
    remaining: int = 0
    done: bool = False

    def __post_init__(self) -> None:
        self.results = [None] * self.n
        self.remaining = self.n

    def dead(self) -> bool:
        return self.done or self.future.cancelled()


@dataclass
class _Job:
    kind: str  # "next" | "loglik" | "gen"
    payload: Any
    call: _Call
    slot: int = 0
    length: int = 0
    ctx: tuple[int, ...] = ()  # loglik: the context's token ids (jobs sharing it share its KV)


@dataclass
class _Encoded:
    ids: list[int]
    n_cont: int  # number of scored (continuation) tokens at the end; 0 for next-token jobs
    text: str
    cont_tokens: list[str] = field(default_factory=list)


class _Incompatible(Exception):
    """The model's KV cache cannot be gathered per row (e.g. sliding-window layers)."""


class HFBackend(Backend):
    """A local transformers model scored in batches by one worker thread.

    Requests are tokenised on a second thread ahead of the model, so the model thread
    does not wait on Python tokenisation in steady state. `threads` sets torch's
    intra-op threads of the model thread only, once when it starts (default: the physical
    cores the process may use, or `OMP_NUM_THREADS` when set). The tokeniser is single-threaded
    (`TOKENIZERS_PARALLELISM=false`), so it never adds a pool of its own.
    """

    kind = "hf"
    TREE_ROW_TOKENS = 1024  # option tokens per tree row (see _tree_chunks)

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
            k: v for k, v in {"revision": revision, "trust_remote_code": trust_remote_code, "adapter": adapter,
                              "load_in_8bit": load_in_8bit, "load_in_4bit": load_in_4bit}.items() if v
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
            tokenizer, model, self._info = load_model(spec, self.device, self.dtype, self.model_args)
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
        self._keeps_logits = _accepts_logits_to_keep(model)
        # Shared-prefix KV reuse (system prompt, instructions, few-shot examples), and
        # per-context reuse: the options of one item are scored on top of their context's KV.
        self.prefix_cache = os.environ.get("LLMSCOPE_PREFIX_CACHE", "1") != "0"
        self.context_cache = self.prefix_cache
        self.min_prefix = 8
        self._prefix_ids: list[int] = []
        self._prefix_kv: list[tuple[Any, Any]] | None = None
        self._stats: dict[str, Any] = defaultdict(float)
        self.tree_mask, self.scoring = self._choose_loglik_path()
        self._tok_queue: queue.Queue[tuple[str, Any, _Call] | None] = queue.Queue()
        self._queue: queue.Queue[list[_Job] | None] = queue.Queue()
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
            next_token=True, exact_next_token=True, loglik=True, local_loglik=True, batched_prompts=True,
            generate=True, chat=self.has_chat, reasoning=False, prompt_logprobs=True, tokenizer=True,
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
            system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
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

    def vocab_text(self) -> list[str]:
        """Each vocabulary id decoded on its own (cached)."""
        if self._vocab_text is None:
            n = len(self.tok)
            self._vocab_text = self.tok.batch_decode(
                [[i] for i in range(n)], skip_special_tokens=False
            )
        return self._vocab_text

    def _piece(self, tid: int) -> str:
        text = self._piece_text.get(tid)
        if text is None:
            text = self._piece_text[tid] = self.tok.decode([tid])
        return text

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

    def _encode_pair(self, context: str, continuation: str, chat: bool) -> _Encoded:
        """Tokenise context+continuation together; score the tokens after the context's own."""
        return self._encode_pairs([(context, continuation)], chat)[0]

    def _encode_pairs(self, requests: list[tuple[str, str]], chat: bool) -> list[_Encoded]:
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
        out: list[_Encoded] = []
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
            out.append(_Encoded(ids=ids, n_cont=n_cont, text=context, cont_tokens=cont_tokens))
        return out

    def _submit(self, kind: str, args: Any, n: int) -> asyncio.Future[Any]:
        if self._closed:
            raise BackendError("backend is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._tok_queue.put((kind, args, _Call(fut, loop, n, single=kind != "loglik")))
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
                _set(call, exc=e if isinstance(e, BackendError) else _wrap(e))
                continue
            self._queue.put(jobs)

    def _make_jobs(self, kind: str, args: Any, call: _Call) -> list[_Job]:
        if kind == "loglik":
            requests, chat = args
            encs = self._encode_pairs(requests, chat)
            for e in encs:
                self._check_length(len(e.ids))
            return [
                _Job("loglik", e, call, i, len(e.ids), tuple(e.ids[: -e.n_cont]))
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
            enc = _Encoded(ids=ids, n_cont=0, text=text)
            return [_Job("next", (enc, answers, top_k), call, 0, len(ids))]
        prompt, params, chat = args
        text = self.render(prompt, chat=chat)
        ids = self._encode_prompt(text, chat)
        self._check_length(len(ids))
        return [_Job("gen", (ids, text, params), call, 0, len(ids))]

    def _check_length(self, n: int) -> None:
        if self.max_length and n > self.max_length:
            raise BackendError(f"prompt has {n} tokens; the model accepts {self.max_length}")

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

    # -- worker thread -------------------------------------------------------------------
    def _worker(self) -> None:
        import torch

        torch.set_grad_enabled(False)
        torch.set_num_threads(self._torch_threads)  # this thread's intra-op pool only, once
        self._torch_threads = torch.get_num_threads()
        while True:
            item = self._queue.get()
            if item is None:
                return
            jobs = list(item)
            # Drain what is already waiting so neighbours in length share a batch; a burst
            # still being tokenised joins as long as parts keep arriving within 2 ms.
            deadline = time.perf_counter() + 0.002
            while len(jobs) < self.max_batch_size * 8:
                try:
                    nxt = self._queue.get(timeout=max(0.0, deadline - time.perf_counter()))
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                jobs.extend(nxt)
                deadline = time.perf_counter() + 0.002
            self._run_jobs(jobs)

    def _run_jobs(self, jobs: list[_Job]) -> None:
        by_kind: dict[str, list[_Job]] = defaultdict(list)
        for j in jobs:
            if not j.call.dead():
                by_kind[j.kind].append(j)
        for kind, group in by_kind.items():
            if kind == "gen":
                for j in group:
                    self._run_safely([j], self._run_generate)
                continue
            if kind == "next":
                group.sort(key=lambda j: -j.length)
                runner = self._run_next
            else:
                # The options of one context stay adjacent, longest contexts first.
                group.sort(key=lambda j: (-len(j.ctx), j.ctx, -j.payload.n_cont))
                runner = self._run_loglik
            i = 0
            while i < len(group):
                n, rows = self._cut(kind, group, i)
                i += self._run_with_backoff(group[i : i + n], runner, rows)

    def _cut(self, kind: str, group: list[_Job], i: int) -> tuple[int, int]:
        """How many jobs from `i` make the next batch, and its row count (≤ batch_size).

        A loglik batch runs one row per context, then one row per multi-token option of a
        shared context; each pass holds at most batch_size rows.
        """
        bs = self.batch_size
        if kind != "loglik":
            n = min(bs, len(group) - i)
            return n, n
        if self.tree_mask:  # one row per context (per chunk of a context's many options)
            j = i
            rows = 0
            while j < len(group):
                k = j + 1
                while k < len(group) and group[k].ctx == group[j].ctx:
                    k += 1
                chunks = self._tree_chunks([x.payload.n_cont for x in group[j:k]])
                if rows + len(chunks) > bs:
                    if rows == 0:  # a context with more chunks than a batch holds: split it
                        return sum(len(c) for c in chunks[:bs]), bs
                    break
                rows += len(chunks)
                j = k
            return j - i, rows
        rows1 = rows2 = n = 0
        j = i
        while j < len(group):
            k = j + 1
            while k < len(group) and group[k].ctx == group[j].ctx:
                k += 1
            multi = sum(1 for x in group[j:k] if x.payload.n_cont > 1)
            if self.context_cache and k - j > 1:
                r1, r2 = 1, multi
            else:  # one row per multi-token option, one for all one-token options
                r1, r2 = multi + (multi < k - j), 0
            if rows1 + r1 > bs or rows2 + r2 > bs:
                if n == 0:  # one context with more options than a batch holds: split it
                    take = m = singles = 0
                    while j + take < k:
                        one = group[j + take].payload.n_cont == 1
                        if m >= bs and (not one or not self.context_cache):
                            break
                        m += not one
                        singles += one
                        take += 1
                    extra = 1 if singles and not self.context_cache else 0
                    return take, max(1, m + extra)
                break
            rows1 += r1
            rows2 += r2
            n += k - j
            j = k
        return n, max(rows1, rows2)

    def _run_with_backoff(self, batch: list[_Job], runner: Any, rows: int) -> int:
        """Run a batch; returns how many jobs were settled (0: re-cut at a smaller size)."""
        import torch

        try:
            t0 = time.perf_counter()
            results = runner(batch)
            self._stats["forward_seconds"] += time.perf_counter() - t0
            self._stats["batches"] += 1
            self._stats["tokens"] += sum(j.length for j in batch)
            for j, r in zip(batch, results, strict=True):
                _resolve(j, r)
            self._batch_ok(rows)
            return len(batch)
        except torch.OutOfMemoryError:
            if len(batch) == 1 or rows <= 1:
                for j in batch:
                    _fail(j, BackendError("out of memory even with batch size 1"))
                return len(batch)
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()
            self._batch_oom(rows)
            return 0
        except Exception as e:  # one bad batch must not kill the worker; items get the error
            if len(batch) == 1:
                _fail(batch[0], e if isinstance(e, BackendError) else _wrap(e))
                return 1
            # retry one by one so only the offending item fails
            for j in batch:
                self._run_safely([j], runner)
            return len(batch)

    def _batch_ok(self, rows: int) -> None:
        # Only a full batch shows that the current size fits.
        if self.batch_size >= self.max_batch_size or rows < self.batch_size:
            return
        self._ok_streak += 1
        if self._ok_streak >= self.grow_after:
            self.batch_size = min(self.max_batch_size, self.batch_size + (self.batch_size + 1) // 2)
            self._ok_streak = 0
            self._grown_since_oom = True
            self._stats["batch_regrowths"] += 1

    def _batch_oom(self, rows: int) -> None:
        if self._grown_since_oom:
            self.grow_after *= 2  # the larger size failed again: be slower to try it next time
        self._grown_since_oom = False
        self._ok_streak = 0
        self.batch_size = max(1, min(self.batch_size, rows) // 2)
        self._stats["oom_backoffs"] += 1

    def _run_safely(self, batch: list[_Job], runner: Any) -> None:
        try:
            for j, r in zip(batch, runner(batch), strict=True):
                _resolve(j, r)
        except Exception as e:
            for j in batch:
                _fail(j, e if isinstance(e, BackendError) else _wrap(e))

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

    def _run_next(self, batch: list[_Job]) -> list[NextTokenOut]:
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

    def _run_loglik(self, batch: list[_Job]) -> list[LogLikOut]:
        if self.tree_mask:
            out = self._loglik_tree(batch)
            if out is not None:
                return out
        try:
            return self._loglik_batch(batch, self.context_cache)
        except _Incompatible:
            self.context_cache = False  # e.g. sliding-window layers: one row per option
            return self._loglik_batch(batch, False)

    def _loglik_batch(self, batch: list[_Job], share: bool) -> list[LogLikOut]:
        """Score continuations. Pass 1: one row per context (its last position scores
        every option's first token); a context that is alone keeps its continuation in
        the row. Pass 2: the other tokens of multi-token options, as rows continuing
        their context's KV cache from pass 1, so a context runs once per item.
        """
        import torch

        encs: list[_Encoded] = [j.payload for j in batch]
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
        for i, e in enumerate(encs):
            n = e.n_cont if whole[i] else 1
            cont = e.ids[-e.n_cont :][:n]
            rows = logp1[row1[i], keep1 - n :, :]
            tl[i] = rows.gather(-1, torch.tensor(cont, device=rows.device)[:, None])[:, 0].tolist()
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
            self._stats["loglik_context_shared"] += len(second)
        self._stats["loglik_rows_saved"] += len(batch) - len(seqs)
        return [
            LogLikOut(
                logprob=float(math.fsum(t)),
                n_tokens=e.n_cont,
                token_logprobs=t,
                tokens=e.cont_tokens,
                n_context_tokens=len(e.ids) - e.n_cont,
            )
            for e, t in zip(encs, tl, strict=True)
        ]

    # -- tree attention mask: one row per context, its options as branches ---------------
    def _choose_loglik_path(self) -> tuple[bool, dict[str, Any]]:
        """Use the tree mask where the attention honours a custom 4-D mask; else the padded path.

        Checked, not assumed: a short probe scores two branches on one context through the
        tree mask and through plain forwards and compares the log-probs.
        """
        if os.environ.get("LLMSCOPE_TREE_MASK", "1") == "0":
            return False, {"loglik_path": "padded", "reason": "LLMSCOPE_TREE_MASK=0"}
        impl = getattr(self.model.config, "_attn_implementation", None) or "eager"
        if impl not in _TREE_ATTENTION:
            return False, {"loglik_path": "padded",
                           "reason": f"attention {impl!r} takes no custom 4-D mask"}
        try:
            diff = self._probe_tree()
        except Exception as e:  # any architecture that refuses the mask: the padded path
            return False, {"loglik_path": "padded", "reason": f"tree-mask probe failed: {_wrap(e)}"}
        self._stats.clear()  # the probe's tokens are not the run's
        # Half precision rounds log-probs of ~-15 by ~0.06; a mask that is ignored moves them by nats.
        tol = 1e-3 if self.dtype == "float32" else 0.25
        if not diff <= tol:
            return False, {"loglik_path": "padded",
                           "reason": f"tree-mask probe differs from plain forwards by {diff:.2g}"}
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

    def _loglik_tree(self, batch: list[_Job]) -> list[LogLikOut] | None:
        """All options of each context in one row; None when the batch must take the padded path."""
        import torch

        encs: list[_Encoded] = [j.payload for j in batch]
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for i, j in enumerate(batch):
            groups[j.ctx].append(i)
        seqs: list[list[int]] = []
        ctx_lens: list[int] = []
        branches: list[list[int]] = []
        reserve: list[int] = []
        where: list[tuple[int, int]] = [(0, 0)] * len(batch)  # (row, branch start after the context)
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
        vals = logp[
            torch.tensor(flat_pos, device=logp.device), torch.tensor(flat_tok, device=logp.device)
        ].tolist()
        self._stats["loglik_tree_batches"] += 1
        self._stats["loglik_tree_rows"] += len(seqs)
        self._stats["loglik_rows_saved"] += len(batch) - len(seqs)
        out = []
        k = 0
        for e in encs:
            t = vals[k : k + e.n_cont]
            k += e.n_cont
            out.append(LogLikOut(logprob=float(math.fsum(t)), n_tokens=e.n_cont, token_logprobs=t,
                                 tokens=e.cont_tokens, n_context_tokens=len(e.ids) - e.n_cont))
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
        mask = torch.zeros(allowed.shape, dtype=tdtype).masked_fill_(~allowed, torch.finfo(tdtype).min)
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


# Attention implementations that add a custom 4-D float mask as given (flash kernels and
# flex attention take no such mask).
_TREE_ATTENTION = frozenset({"sdpa", "eager"})


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


def _plain_layers(cache: Any) -> list[tuple[Any, Any]]:
    """(keys, values) per layer of a plain dynamic cache; anything else cannot be shared."""
    layers = getattr(cache, "layers", None)
    if not layers or any(type(lay).__name__ != "DynamicLayer" for lay in layers):
        raise BackendError("prefix cache: only plain (non-sliding) dynamic caches are shared")
    return [(lay.keys, lay.values) for lay in layers]


def _wrap(e: BaseException) -> BackendError:
    return BackendError(f"{type(e).__name__}: {e}")


def _set(call: _Call, value: Any = None, exc: BaseException | None = None) -> None:
    def apply() -> None:
        if call.future.done():
            return
        if exc is not None:
            call.future.set_exception(exc)
        else:
            call.future.set_result(value)

    try:
        call.loop.call_soon_threadsafe(apply)
    except RuntimeError:  # the caller's event loop is gone; nobody is waiting
        pass


def _resolve(job: _Job, value: Any) -> None:
    call = job.call
    if call.done:
        return
    call.results[job.slot] = value
    call.remaining -= 1
    if call.remaining == 0:
        call.done = True
        _set(call, call.results[0] if call.single else call.results)


def _fail(job: _Job, exc: BaseException) -> None:
    call = job.call
    if not call.done:
        call.done = True
        _set(call, exc=exc)


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
