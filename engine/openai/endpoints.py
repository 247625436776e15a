"""Endpoints and the API key: base URLs read, checked, shown without secrets; the key redacted."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit, urlunsplit

from llmscope.engine.backend import BackendConfigError

OPENAI_URL = "https://api.openai.com/v1"

_AUTH_VALUE = re.compile(
    r"((?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)(?:(?:bearer|basic|token)\s+)?[^\s'\",;}\]]+",
    re.IGNORECASE,
)
_SCHEME_VALUE = re.compile(r"\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
_USERINFO = re.compile(r"(\w+://)[^/\s@]+@")


def secret_forms(secret: str) -> list[str]:
    """The key and the encodings it may travel in. HTTP Basic puts base64("user:key") on the
    wire, so the key's base64 sits at one of three byte alignments inside a longer blob: for
    each, keep the characters that depend on key bytes only."""
    raw = secret.encode()
    forms = {secret, base64.b64encode(raw).decode().rstrip("=")}
    for shift in (0, 1, 2):
        enc = base64.b64encode(b"\0" * shift + raw).decode()
        start = -(-shift // 3) * 4
        end = ((shift + len(raw)) // 3) * 4
        if end - start >= 8:
            forms.add(enc[start:end])
    return sorted(forms, key=len, reverse=True)


def redactor(secret: str | None) -> Callable[[str], str]:
    """Redact the key, its base64 forms, any Authorization value and URL userinfo."""
    forms = secret_forms(secret) if secret and len(secret) >= 4 and secret != "EMPTY" else []

    def redact(text: str) -> str:
        for f in forms:
            text = text.replace(f, "***")
        text = _AUTH_VALUE.sub(lambda m: m.group(1) + "***", text)
        text = _SCHEME_VALUE.sub(lambda m: m.group(1) + " ***", text)
        return _USERINFO.sub(lambda m: m.group(1) + "***@", text)

    return redact


def public_url(url: str) -> str:
    """The base URL without user:password@ or a query string (they may carry secrets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address keeps its brackets
        host = f"[{host}]"
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


# An `@FILE` base URL names a list of URLs, one a line: anything larger is not such a list.
MAX_URL_FILE_BYTES = 64 * 1024


def _read_url_file(item: str) -> list[str]:
    """The URLs listed in the file `item` (`@PATH`) names, each checked. The file may be anyone's
    (a study file chooses it): an error names the file and the line, never what the line holds."""
    import os
    import stat

    path = item[1:]
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block, /dev/zero never ends
            raise BackendConfigError(
                f"--base-url {item}: not a regular file (expected a list of URLs)"
            )
        with open(path, "rb") as f:
            raw = f.read(MAX_URL_FILE_BYTES + 1)
    except OSError as e:
        raise BackendConfigError(
            f"--base-url {item}: cannot read {path}: {e.strerror or e}"
        ) from None
    if len(raw) > MAX_URL_FILE_BYTES:
        raise BackendConfigError(
            f"--base-url {item}: larger than {MAX_URL_FILE_BYTES // 1024} KiB, not a list of URLs"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BackendConfigError(f"--base-url {item}: not UTF-8 text, not a list of URLs") from None
    found: list[str] = []
    for n, line in enumerate(text.split("\n"), 1):
        ln = line.split("#", 1)[0].strip()
        if not ln:
            continue
        try:
            check_base_url(ln)
        except BackendConfigError as e:
            why = "has user:password@ in it" if "user:password@" in str(e) else "is not a URL"
            raise BackendConfigError(
                f"--base-url {item}: line {n} {why} (the file must list one http(s) URL a line, "
                "such as http://127.0.0.1:8000/v1)"
            ) from None
        found.append(ln)
    if not found:
        raise BackendConfigError(f"--base-url {item}: no URLs in {path}")
    return found


def expand_base_urls(value: str | Sequence[str] | None) -> list[str]:
    """Base URLs from one string or a list; `@FILE` items read one URL per line (blank
    lines and `#` comments skipped; every line must be an http(s) URL, and an error never
    shows a line's content). Trailing slashes are dropped."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        item = str(item).strip()
        if item.startswith("@"):
            out.extend(_read_url_file(item))
        elif item:
            out.append(item)
    return [u.rstrip("/") for u in out]


def check_base_url(url: str) -> None:
    """Refuse a base URL that would leak or mis-send the key (userinfo goes out as HTTP Basic)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as e:
        raise BackendConfigError(f"--base-url {shown_url(url)!r} is not a valid URL: {e}") from None
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise BackendConfigError(
            "--base-url must not contain user:password@ (it would be sent as HTTP Basic auth and "
            "could be stored); put the key in OPENAI_API_KEY instead"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BackendConfigError(
            f"--base-url {shown_url(url)!r} must be an http(s) URL such as http://127.0.0.1:8000/v1"
        )


def shown_url(url: str) -> str:
    """A refused URL as an error may show it: no query, no fragment, nothing before an `@`
    (with or without a scheme: `KEY@host` too), at most 200 characters."""
    u = url.split("?", 1)[0].split("#", 1)[0]
    if "@" in u:
        scheme, sep, rest = u.partition("://")
        u = (scheme + sep if sep else "") + "***@" + (rest if sep else u).rsplit("@", 1)[1]
    return u if len(u) <= 200 else u[:200] + "..."
