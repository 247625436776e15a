"""Loading a local model: device, dtype and threads; hub or cached snapshot; GGUF converted once and cached."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llmscope.engine.models import ModelSpec, cache_dir, file_sha256

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
            cores.add(
                Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")
                .read_text()
                .strip()
            )
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


# Models kept loaded inside `keep_loaded()` (a study's cells on one model: llmscope/studies/run.py).
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
            load_in_8bit=bool(margs.get("load_in_8bit")),
            load_in_4bit=bool(margs.get("load_in_4bit")),
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
    host, port = (
        url.hostname or "huggingface.co",
        url.port or (443 if url.scheme == "https" else 80),
    )
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
        return (
            repo  # a local folder, or the user switched the hub off (then only the cache is read)
        )
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
