"""Defaults from `llmscope.toml` files, beneath command-line flags and environment variables.

Files read, later ones overriding earlier ones key by key:

1. the user file: `$XDG_CONFIG_HOME/llmscope/llmscope.toml` (default `~/.config/llmscope/llmscope.toml`);
2. the project file: `./llmscope.toml` in the working directory;
3. or, instead of both, the file named by `$LLMSCOPE_CONFIG`.

Precedence for a value: command-line flag > environment variable (`LLMSCOPE_DB`,
`OPENAI_BASE_URL`) > project file > user file > built-in default. The API key is never read
from a file: it stays in `$OPENAI_API_KEY`, so a config file can be shared or committed.

Keys that decide where the key is sent (`CREDENTIAL_KEYS`: `base_url`) are read only from the
user's own file or the file `$LLMSCOPE_CONFIG` names: a `./llmscope.toml` comes with a cloned
project like its data, and must not send `$OPENAI_API_KEY` to a host of its author's choosing.
Such a value is kept in `Settings.untrusted` (not used) so the CLI can say why it was ignored.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class SettingsError(Exception):
    """A config file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class Key:
    """One settable key: its type, the allowed range, and what it sets."""

    type: type
    help: str
    minimum: float | None = None


KEYS: dict[str, Key] = {
    "db": Key(str, "DuckDB file for every command (flag --db, env LLMSCOPE_DB)"),
    "model": Key(str, "model for `llmscope run` (flag --model)"),
    "base_url": Key(str, "OpenAI-compatible endpoint (flag --base-url, env OPENAI_BASE_URL)"),
    "concurrency": Key(int, "API requests in flight (flag --concurrency)", minimum=1),
    "timeout": Key(float, "API request timeout in seconds (flag --timeout)", minimum=0.001),
    "device": Key(str, "device for local models (flag --device)"),
    "dtype": Key(str, "dtype for local models (flag --dtype)"),
    "batch_size": Key(int, "batch size for local models (flag --batch-size)", minimum=1),
    "threads": Key(int, "torch threads for local models on CPU (flag --threads)", minimum=1),
}

SECRET_KEYS = ("api_key", "openai_api_key", "key")
CREDENTIAL_KEYS = ("base_url",)  # where the API key goes: never from a project file


@dataclass
class Settings:
    """Values read from config files, and where each came from."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, Path] = field(default_factory=dict)
    untrusted: dict[str, tuple[Any, Path]] = field(default_factory=dict)  # refused project values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


def config_paths(cwd: Path | None = None, env: dict[str, str] | None = None) -> list[Path]:
    """The config files consulted, lowest precedence first (whether or not they exist)."""
    env = dict(os.environ) if env is None else env
    if env.get("LLMSCOPE_CONFIG"):
        return [Path(env["LLMSCOPE_CONFIG"]).expanduser()]
    base = Path(env.get("XDG_CONFIG_HOME") or Path(env.get("HOME") or Path.home()) / ".config")
    return [base / "llmscope" / "llmscope.toml", (cwd or Path.cwd()) / "llmscope.toml"]


def _check(path: Path, key: str, value: Any) -> Any:
    spec = KEYS[key]
    if spec.type is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, spec.type):
        raise SettingsError(
            f"{path}: {key} must be {spec.type.__name__}, got {type(value).__name__} {value!r}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise SettingsError(f"{path}: {key} must be a finite number, got {value!r}")
    if spec.minimum is not None and isinstance(value, int | float) and value < spec.minimum:
        raise SettingsError(f"{path}: {key} must be >= {spec.minimum:g}, got {value!r}")
    if isinstance(value, str) and not value.strip():
        raise SettingsError(f"{path}: {key} is empty")
    return value


def read_file(path: Path) -> dict[str, Any]:
    """Parse and validate one config file; every problem names the file and the key."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{path}: not valid TOML: {e}") from e
    except OSError as e:
        raise SettingsError(f"{path}: cannot read: {e.strerror or e}") from e
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key.lower() in SECRET_KEYS:
            raise SettingsError(
                f"{path}: {key}: keys are never read from files; set OPENAI_API_KEY in the environment"
            )
        if key not in KEYS:
            raise SettingsError(f"{path}: unknown key {key!r} (allowed: {', '.join(KEYS)})")
        out[key] = _check(path, key, value)
    return out


def load_settings(cwd: Path | None = None, env: dict[str, str] | None = None) -> Settings:
    """Read the config files that exist, later files overriding earlier ones."""
    env = dict(os.environ) if env is None else env
    s = Settings()
    paths = config_paths(cwd, env)
    explicit = bool(env.get("LLMSCOPE_CONFIG"))
    for p in paths:
        if not p.exists():
            if explicit:
                raise SettingsError(f"{p}: LLMSCOPE_CONFIG names a file that does not exist")
            continue
        if p.is_dir():
            raise SettingsError(f"{p}: is a directory, expected a TOML file")
        project = not explicit and p == paths[-1]
        for k, v in read_file(p).items():
            if project and k in CREDENTIAL_KEYS:
                s.untrusted[k] = (v, p)
                continue
            s.values[k] = v
            s.sources[k] = p
    return s


def endpoints_file(env: dict[str, str] | None = None) -> Path:
    """The user's own list of endpoints they chose (flag, environment, config), beside their
    config file: a resume of their own run needs no --trust-db, someone else's database does."""
    env = dict(os.environ) if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "llmscope" / "endpoints.txt"


def _endpoint_form(url: str) -> str | None:
    """What the endpoints file keeps of a URL: scheme, host, port and path (never a user, a
    password or a query, which may carry a key); None for anything that is not an http(s) URL."""
    from llmscope.engine.backend import BackendConfigError
    from llmscope.engine.openai import public_url
    from llmscope.engine.openai.endpoints import check_base_url

    try:
        check_base_url(url.strip())
    except BackendConfigError:
        return None
    return public_url(url.strip().rstrip("/"))


def _endpoint_lines(env: dict[str, str] | None = None) -> list[str]:
    try:
        return endpoints_file(env).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []


def used_endpoints(env: dict[str, str] | None = None) -> set[str]:
    """Endpoints the user chose before (read from `endpoints_file`, in their public form); empty
    when unreadable. A line that is not an http(s) URL (an older file's) is ignored."""
    return {f for f in map(_endpoint_form, _endpoint_lines(env)) if f}


def endpoint_forms(urls: list[str] | set[str]) -> set[str]:
    """`urls` as the endpoints file keeps them (to compare a URL with the ones trusted)."""
    return {f for f in map(_endpoint_form, urls) if f}


def untrusted_endpoints(urls: list[str], trusted: set[str]) -> list[str]:
    """The URLs of `urls` whose public form is not among `trusted` (public forms)."""
    return [u for u in urls if (_endpoint_form(u) or "") not in trusted]


def remember_endpoints(urls: list[str], env: dict[str, str] | None = None) -> None:
    """Add endpoints the user chose (flag, environment, own config, the TUI form, or trusted
    with --trust-study) to their own list; failing to write it only means a later resume asks.

    The file keeps scheme, host, port and path alone, readable by the user alone (0600). A file
    holding anything else is rewritten: URLs keep their public form, a URL with a key in it
    (which llmscope refuses) and lines that are not URLs are dropped."""
    lines = _endpoint_lines(env)
    kept = list(dict.fromkeys(f for f in map(_endpoint_form, lines) if f))
    new = [f for f in dict.fromkeys(f for f in map(_endpoint_form, urls) if f) if f not in kept]
    path = endpoints_file(env)
    try:
        mode_ok = not path.exists() or (path.stat().st_mode & 0o077) == 0
    except OSError:
        mode_ok = True
    if not new and kept == lines and mode_ok:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write("".join(u + "\n" for u in [*kept, *new]))
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
    except OSError:
        pass


def trusted_endpoints(
    settings: Settings | None = None, env: dict[str, str] | None = None
) -> set[str]:
    """Base URLs the user named themselves: `$OPENAI_BASE_URL`, their own config file's
    `base_url` (never a project file's), and the endpoints they chose before. A base URL stored
    in a database or written in a study file is sent the key only when it is one of these, or
    when the user says so (--trust-db, --trust-study, a confirmation). Compared in their public
    form (`endpoint_forms`)."""
    from llmscope.engine.openai import expand_base_urls

    env = dict(os.environ) if env is None else env
    user_url = settings.values.get("base_url") if settings is not None else None
    return (
        endpoint_forms(expand_base_urls(env.get("OPENAI_BASE_URL")))
        | endpoint_forms(expand_base_urls(user_url))
        | used_endpoints(env)
    )
