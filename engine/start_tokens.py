"""What a model's text starts with: the start token, the document separator, as text.

Sentence log-probabilities need something to condition the first token on. Locally the
backend's tokenizer says (engine/hf/: an empty context becomes BOS, else EOS;
engine/tasks/minpairs.py: the document separator `<|endoftext|>`). Over HTTP the tokenizer
sits inside the server, and a sentence sent with no context has a first token nothing
scores (vLLM returns no log-prob for a prompt's first token). vLLM exposes its tokenizer:
`POST /tokenize` (always on) tells whether it adds a BOS itself and whether a text is one
special token; `GET /tokenizer_info` (on with `--enable-tokenizer-info-endpoint`) names the
BOS and EOS tokens. From those, `StartTokens` gives the same explicit texts the local
backend uses; the backend sends them as text (vLLM's tokenizer turns a special token's text
back into its id, which `check_special` verifies), and the run records them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

DOC_SEPARATOR = "<|endoftext|>"


@dataclass(frozen=True)
class StartTokens:
    """A tokenizer's start-of-text facts, as texts a prompt can carry.

    - `adds_bos`: the tokenizer puts BOS before every text itself.
    - `empty_context`: what an empty context becomes so the first token is scored: "" when
      the tokenizer adds BOS itself, else the BOS text (EOS without one); None = unknown.
    - `separator`: the document separator (`<|endoftext|>` when it is one special token,
      else EOS); None = unknown.
    - `source`: where the facts come from; `note`: what could not be learned.
    """

    adds_bos: bool
    empty_context: str | None
    separator: str | None
    source: str
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def server_root(base_url: str) -> str:
    """vLLM serves /tokenize beside /v1, at the root of the base URL."""
    parts = urlsplit(base_url.rstrip("/"))
    path = parts.path[: -len("/v1")] if parts.path.endswith("/v1") else parts.path
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _token_text(value: Any) -> str | None:
    """A tokenizer_info token field: a string, or an AddedToken dumped as {content: ...}."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str) and value["content"]:
        return str(value["content"])
    return None


async def from_vllm(
    base_url: str,
    model: str,
    headers: dict[str, str],
    timeout: float = 10.0,
    clean: Callable[[Any], Any] | None = None,
) -> StartTokens | None:
    """The start tokens of the model a vLLM server serves, or None when the server has no
    `/tokenize` (not vLLM). Raises nothing for a missing `/tokenizer_info`: the result then
    says what is unknown (`empty_context` None unless the tokenizer adds BOS itself).
    `clean`: applied to the `/tokenizer_info` reply before it is read (the backend's key
    redaction and text repair: its token texts are sent as context and stored with the run)."""
    import httpx  # here, not at import: every command line builds its parser through this module

    root = server_root(base_url)
    async with httpx.AsyncClient(timeout=timeout, headers=headers) as http:

        async def tokenize(text: str, special: bool) -> list[int] | None:
            try:
                r = await http.post(
                    f"{root}/tokenize",
                    json={"model": model, "prompt": text, "add_special_tokens": special},
                )
            except httpx.HTTPError:
                return None
            if r.status_code != 200:
                return None
            try:
                toks = r.json().get("tokens")
            except ValueError:
                return None
            return [int(t) for t in toks] if isinstance(toks, list) else None

        empty = await tokenize("", True)
        if empty is None or not await tokenize("a", False):
            return None  # no vLLM-style /tokenize (it must turn a letter into a token)
        adds_bos = len(empty) > 0
        sep_ids = await tokenize(DOC_SEPARATOR, False)
        separator = DOC_SEPARATOR if sep_ids is not None and len(sep_ids) == 1 else None
        info: dict[str, Any] = {}
        try:
            r = await http.get(f"{root}/tokenizer_info")
            if r.status_code == 200 and isinstance(r.json(), dict):
                info = r.json() if clean is None else clean(r.json())
        except (httpx.HTTPError, ValueError):
            info = {}
        bos, eos = _token_text(info.get("bos_token")), _token_text(info.get("eos_token"))
        notes = []
        # A named token counts only when the server's tokenizer reads its text as one token.
        named: dict[str, str | None] = {"bos": bos, "eos": eos}
        for name, text in named.items():
            if text is not None and len(await tokenize(text, False) or []) != 1:
                notes.append(f"{name} {text!r} is not one token as text")
                named[name] = None
        bos, eos = named["bos"], named["eos"]
        if separator is None and eos is not None:
            separator = eos
        if adds_bos:
            empty_context: str | None = ""
        else:
            empty_context = bos or eos
        if not info:
            notes.append(
                "GET /tokenizer_info is off (start vLLM with --enable-tokenizer-info-endpoint "
                "to learn the BOS/EOS tokens)"
            )
        src = "vLLM /tokenize" + (" + /tokenizer_info" if info else "")
        return StartTokens(
            adds_bos=adds_bos,
            empty_context=empty_context,
            separator=separator,
            source=src,
            note="; ".join(notes) or None,
        )


def from_tokenizer(tok: Any, add_bos: bool) -> StartTokens:
    """The same facts from a local tokenizer (as engine/hf/ and minpairs use them)."""
    vocab = set(getattr(tok, "all_special_tokens", []) or []) | set(
        (getattr(tok, "get_added_vocab", lambda: {})() or {}).keys()
    )
    eos = getattr(tok, "eos_token", None)
    bos = getattr(tok, "bos_token", None)
    sep = DOC_SEPARATOR if DOC_SEPARATOR in vocab else (str(eos) if eos else None)
    empty = "" if add_bos else (str(bos) if bos else (str(eos) if eos else None))
    return StartTokens(
        adds_bos=bool(add_bos), empty_context=empty, separator=sep, source="local tokenizer"
    )
