"""How a backend is made: one typed `BackendConfig`, filled by the CLI and the TUI alike,
validated at the edge, stored with the run (so `--resume ID` rebuilds the same backend)
and turned into a backend by a registry keyed by backend kind.

The API key is never part of a config: it comes from the environment when the backend
is built and is never stored.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmscope.engine.backend import Backend
from llmscope.engine.models import ModelSpec, ModelSpecError, hub_offline_missing, parse_model


class ConfigError(Exception):
    """A backend option is out of range or cannot be honoured (one line for the user)."""


# field -> (command-line flag, lowest, highest); None = no bound on that side
NUMERIC_RANGES: dict[str, tuple[str, float | None, float | None]] = {
    "concurrency": ("--concurrency", 1, 1024),
    "top_logprobs": ("--top-logprobs", 1, 100),
    "max_retries": ("--max-retries", 0, 100),
    "timeout": ("--timeout", 0.001, 86400),
    "samples": ("--samples", 1, 10000),
    "batch_size": ("--batch-size", 1, 65536),
    "threads": ("--threads", 1, 4096),
    "seed": ("--seed", 0, 2**32 - 1),
}

# Fields that change what a model answers: a resume may not change them (the run's
# results would mix two configurations). The others (concurrency, timeouts, batch size,
# threads, device) only change how fast answers come.
IDENTITY_FIELDS = (
    "kind",
    "model",
    "base_url",
    "revision",
    "trust_remote_code",
    "adapter",
    "system_prompt",
    "dtype",
    "load_in_8bit",
    "load_in_4bit",
    "sp_prefix",
    "top_logprobs",
    "samples",
    "reasoning",
    "seed",
    "reasoning_effort",
)

DTYPES = ("auto", "float32", "bfloat16", "float16")
# The OpenAI `reasoning_effort` values (chat requests); None = not sent unless the model is a
# reasoning model, which then gets the backend's fallback ladder (minimal, low, none).
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")


@dataclass
class BackendConfig:
    """Every option needed to build (and re-build) a backend; never the API key."""

    model: str | None = None  # the --model argument (None: the embedded default)
    kind: str = ""  # "hf" | "openai"; filled from `model` by `resolve()`
    # API backends
    base_url: str | list[str] | None = None  # several: round-robin over replicas of one model
    concurrency: int = 8
    timeout: float | None = None
    max_retries: int | None = None
    top_logprobs: int = 20
    samples: int | None = None
    reasoning: bool = False
    reasoning_effort: str | None = None  # one of REASONING_EFFORTS: sent as given, never lowered
    # local models
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 16
    threads: int | None = None
    sp_prefix: bool = False
    revision: str | None = None
    trust_remote_code: bool = False
    adapter: str | None = None
    load_in_8bit: bool = False
    load_in_4bit: bool = False
    # both
    system_prompt: str | None = None
    chat: bool | None = None  # None: the task's default
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # kept from a newer llmscope's record

    # -- validation ---------------------------------------------------------------------
    def validate(self) -> BackendConfig:
        """Raise ConfigError naming the flag and its allowed values; returns self."""
        for name, (flag, lo, hi) in NUMERIC_RANGES.items():
            v = getattr(self, name)
            if v is None:
                continue
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or (isinstance(v, float) and not math.isfinite(v))
            ):
                raise ConfigError(f"{flag} must be a number, got {v!r}")
            if (lo is not None and v < lo) or (hi is not None and v > hi):
                raise ConfigError(
                    f"{flag} must be between {_num(lo)} and {_num(hi)}, got {_num(v)}"
                )
        if self.dtype not in DTYPES:
            raise ConfigError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.reasoning_effort is not None and self.reasoning_effort not in REASONING_EFFORTS:
            raise ConfigError(
                f"--reasoning-effort must be one of {', '.join(REASONING_EFFORTS)}, "
                f"got {self.reasoning_effort!r}"
            )
        if self.load_in_8bit and self.load_in_4bit:
            raise ConfigError("--load-in-8bit and --load-in-4bit exclude each other; choose one")
        urls = [self.base_url] if isinstance(self.base_url, str) else list(self.base_url or [])
        if any(not isinstance(u, str) or not u.strip() for u in urls):
            raise ConfigError("--base-url must not be empty")
        return self

    def resolve(self) -> tuple[BackendConfig, ModelSpec]:
        """Validate, fill `kind` from the model argument, and check kind-specific options."""
        self.validate()
        spec = parse_model(self.model)
        cfg = dataclasses.replace(self, kind=spec.backend)
        if cfg.kind == "openai":
            local_only = {
                "--revision": cfg.revision,
                "--trust-remote-code": cfg.trust_remote_code,
                "--adapter": cfg.adapter,
                "--load-in-8bit": cfg.load_in_8bit,
                "--load-in-4bit": cfg.load_in_4bit,
            }
            given = [flag for flag, v in local_only.items() if v]
            if given:
                raise ConfigError(
                    f"{', '.join(given)} apply to local models only, not to {cfg.model}"
                )
        elif cfg.reasoning_effort is not None:
            raise ConfigError(
                f"--reasoning-effort applies to API models (openai:NAME) only, not to "
                f"{cfg.model or 'the default model'}"
            )
        return cfg, spec

    # -- records ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        extra = d.pop("extra") or {}
        return {**extra, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BackendConfig:
        """Rebuild a stored config; keys this version does not know are kept in `extra`."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in d.items() if k in names}
        extra = {k: v for k, v in d.items() if k not in names}
        return cls(**known, extra=extra)

    def identity(self) -> dict[str, Any]:
        """The fields that define what the model answers (compared on resume)."""
        out = {k: getattr(self, k) for k in IDENTITY_FIELDS}
        if self.kind != "openai":
            for k in ("base_url", "top_logprobs", "samples", "reasoning", "reasoning_effort"):
                out.pop(k)
        return out

    def differences(self, other: BackendConfig) -> list[str]:
        """`field: stored -> new` for each identity field that differs."""
        a, b = self.identity(), other.identity()
        return [
            f"{k}: {a.get(k)!r} -> {b.get(k)!r}"
            for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)
        ]


def config_of_run(run: dict[str, Any]) -> BackendConfig:
    """The BackendConfig a stored run was made with (runs before schema 3: rebuilt from options)."""
    raw = run.get("backend_config")
    if isinstance(raw, dict):
        return BackendConfig.from_dict(raw)
    opts = run.get("options") or {}
    ident = opts.get("backend") or {}
    cfg = BackendConfig(
        model=opts.get("model_arg"),
        kind=str(ident.get("backend") or ""),
        seed=int(run.get("seed") or 0),
    )
    if ident.get("backend") == "openai":
        cfg.base_url = ident.get("base_url")
        cfg.top_logprobs = int(ident.get("top_logprobs") or 20)
    else:
        cfg.dtype = str(ident.get("dtype") or run.get("dtype") or "auto")
        cfg.sp_prefix = bool(ident.get("sp_prefix"))
    return cfg


@dataclass
class ResumeInputs:
    """What a stored run needs to continue: its suite, task options, limit and backend config."""

    suite_name: str | None
    suite_path: str | None
    task_options: dict[str, Any]
    limit: int | None
    config: BackendConfig


def resume_inputs(run: dict[str, Any]) -> ResumeInputs:
    """Everything `--resume ID` (CLI) or the TUI's resume needs, read from the run record.

    A suite read from a spec file is found again by that file; one without a spec file (an
    external corpus, data/registry.py) by its name and the data path it was read from.
    """
    opts = run.get("options") or {}
    suite_meta = (run.get("meta") or {}).get("suite") or {}
    derived = suite_meta.get("derived")  # other templates: the parent, derived again on load
    base = (derived.get("parent") if isinstance(derived, dict) else None) or suite_meta.get("name")
    name, path = suite_meta.get("spec_path") or base, None
    if not suite_meta.get("spec_path") and suite_meta.get("items_path"):
        name, path = base, suite_meta.get("items_path")
    task = dict(opts.get("task") or {})
    task.pop("task", None)
    return ResumeInputs(name, path, task, opts.get("limit"), config_of_run(run))


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`key=value` task options (JSON values, else text), as `--opt` takes them."""
    import json

    out: dict[str, Any] = {}
    for p in pairs:
        if "=" not in p:
            raise ConfigError(f"options expect key=value, got {p!r}")
        k, v = p.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def _num(v: float | None) -> str:
    if v is None:
        return "any"
    return str(int(v)) if float(v).is_integer() else str(v)


@dataclass
class BuiltBackend:
    """A backend ready to run, with the resolved config to store and the identity options."""

    backend: Backend
    spec: ModelSpec
    config: BackendConfig
    identity: dict[str, Any]


BUILDERS: dict[str, Callable[[BackendConfig, ModelSpec], BuiltBackend]] = {}


def register(
    kind: str,
) -> Callable[
    [Callable[[BackendConfig, ModelSpec], BuiltBackend]],
    Callable[[BackendConfig, ModelSpec], BuiltBackend],
]:
    """Decorator: the builder for one backend kind."""

    def deco(
        fn: Callable[[BackendConfig, ModelSpec], BuiltBackend],
    ) -> Callable[[BackendConfig, ModelSpec], BuiltBackend]:
        BUILDERS[kind] = fn
        return fn

    return deco


def build_backend(cfg: BackendConfig) -> BuiltBackend:
    """Validate `cfg` and build its backend (ConfigError / ModelSpecError for the user)."""
    cfg, spec = cfg.resolve()
    builder = BUILDERS.get(cfg.kind)
    if builder is None:
        raise ConfigError(
            f"no backend for kind {cfg.kind!r} (known: {', '.join(sorted(BUILDERS))})"
        )
    return builder(cfg, spec)


def _model_args(cfg: BackendConfig) -> dict[str, Any]:
    # Recorded in the run identity only when set, so runs without them keep their ids.
    keys = (
        "revision",
        "trust_remote_code",
        "adapter",
        "system_prompt",
        "load_in_8bit",
        "load_in_4bit",
    )
    return {k: getattr(cfg, k) for k in keys if getattr(cfg, k)}


@register("openai")
def _build_openai(cfg: BackendConfig, spec: ModelSpec) -> BuiltBackend:
    from llmscope.engine.backend import BackendError
    from llmscope.engine.openai import OpenAIBackend

    kw: dict[str, Any] = {
        "model": spec.name,
        "base_url": cfg.base_url,
        "concurrency": cfg.concurrency,
        "top_logprobs": cfg.top_logprobs,
        "seed": cfg.seed,
    }
    if cfg.max_retries is not None:
        kw["max_retries"] = cfg.max_retries
    if cfg.timeout is not None:
        kw["timeout"] = cfg.timeout
    if cfg.samples is not None:
        kw["samples"] = cfg.samples
    if cfg.reasoning:
        kw["reasoning"] = True
    if cfg.reasoning_effort is not None:
        kw["reasoning_effort"] = cfg.reasoning_effort
        kw["fixed_effort"] = True
    try:
        backend = OpenAIBackend(**kw)
    except BackendError as e:  # e.g. no key for api.openai.com
        raise ConfigError(str(e)) from e
    if cfg.system_prompt:
        backend.system_prompt = cfg.system_prompt
    # The resolved endpoint (from --base-url or $OPENAI_BASE_URL) is what a resume must reuse.
    desc = backend.describe()
    urls = list(desc.get("base_urls") or [])
    resolved = dataclasses.replace(cfg, base_url=urls if len(urls) > 1 else desc.get("base_url"))
    ident = {
        "backend": "openai",
        "base_url": resolved.base_url,
        "top_logprobs": cfg.top_logprobs,
        **_model_args(cfg),
    }
    if cfg.reasoning_effort is not None:  # only when set, so runs without it keep their ids
        ident["reasoning_effort"] = cfg.reasoning_effort
    return BuiltBackend(backend, spec, resolved, ident)


@register("hf")
def _build_hf(cfg: BackendConfig, spec: ModelSpec) -> BuiltBackend:
    missing = hub_offline_missing(spec, cfg.revision)
    if missing:  # before torch is imported: an offline typo is reported at once
        raise ConfigError(f"cannot load model {cfg.model!r}: {missing}")
    try:
        from llmscope.engine.hf import HFBackend
    except ImportError as e:
        raise ConfigError(
            f"local models need the `hf` extra ({e.name} is missing): pip install 'llmscope[hf]'"
        ) from e
    if cfg.load_in_8bit or cfg.load_in_4bit:
        _check_quantisation(cfg)
    if cfg.adapter:
        _check_adapter(cfg.adapter)
    try:
        backend = HFBackend(
            spec,
            device=cfg.device,
            dtype=cfg.dtype,
            batch_size=cfg.batch_size,
            sp_prefix=cfg.sp_prefix,
            threads=cfg.threads,
            revision=cfg.revision,
            trust_remote_code=cfg.trust_remote_code,
            adapter=cfg.adapter,
            system_prompt=cfg.system_prompt,
            load_in_8bit=cfg.load_in_8bit,
            load_in_4bit=cfg.load_in_4bit,
        )
    except (OSError, ValueError, RuntimeError) as e:
        # transformers reports a missing hub id, no network, a bad GGUF or a wrong device this way
        first = (str(e).strip().splitlines() or [type(e).__name__])[0].rstrip(".")
        raise ConfigError(
            f"cannot load model {cfg.model or 'default'!r}: {first}. Hub ids need internet the first time; "
            "a local folder needs config.json and weights; a .gguf file needs the `gguf` package."
        ) from e
    if cfg.system_prompt and not backend.has_chat:
        raise ConfigError(
            f"--system-prompt needs a chat template, and {spec.display()} has none (it is applied only "
            "through the chat template)"
        )
    ident = {
        "backend": "hf",
        "dtype": backend.dtype,
        "device": backend.device.split(":")[0],
        "sp_prefix": backend.sp_prefix,
        "add_bos": backend.add_bos,
        **_model_args(cfg),
    }
    return BuiltBackend(backend, spec, cfg, ident)


def _check_quantisation(cfg: BackendConfig) -> None:
    flag = "--load-in-8bit" if cfg.load_in_8bit else "--load-in-4bit"
    import importlib.util

    import torch

    if cfg.device not in ("auto",) and not cfg.device.startswith("cuda"):
        raise ConfigError(f"{flag} needs a CUDA device (bitsandbytes), not --device {cfg.device}")
    if not torch.cuda.is_available():
        raise ConfigError(
            f"{flag} needs a CUDA GPU (bitsandbytes quantisation); none is available here"
        )
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError(f"{flag} needs the bitsandbytes package: pip install bitsandbytes")


def _check_adapter(adapter: str) -> None:
    import importlib.util

    if importlib.util.find_spec("peft") is None:
        raise ConfigError(f"--adapter {adapter} needs the peft package: pip install peft")
    p = os.path.expanduser(adapter)
    if os.path.exists(p) and not os.path.isfile(os.path.join(p, "adapter_config.json")):
        raise ConfigError(
            f"--adapter {adapter}: no adapter_config.json in that folder (is it a PEFT adapter?)"
        )


__all__ = [
    "REASONING_EFFORTS",
    "BackendConfig",
    "BuiltBackend",
    "ConfigError",
    "ModelSpecError",
    "build_backend",
    "register",
]
