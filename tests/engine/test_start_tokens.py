"""Start tokens as text: from a local tokenizer, and from a server that has no vLLM /tokenize
(the real vLLM answers are checked in tests/engine/test_server_vllm.py)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

from llmscope.engine.openai.backend import OpenAIBackend
from llmscope.engine.start_tokens import DOC_SEPARATOR, from_tokenizer, from_vllm, server_root
from llmscope.engine.textsafety import REDACTED
from tests.helpers.oai import start_server, stop_server


def test_server_root_drops_the_api_version() -> None:
    assert server_root("http://h:8000/v1") == "http://h:8000"
    assert server_root("http://h:8000/v1/") == "http://h:8000"
    assert server_root("https://h/proxy/v1") == "https://h/proxy"
    assert server_root("http://h:8000") == "http://h:8000"


def _tok(special: list[str], bos: str | None, eos: str | None) -> SimpleNamespace:
    return SimpleNamespace(
        all_special_tokens=special, get_added_vocab=lambda: {}, bos_token=bos, eos_token=eos
    )


def test_from_tokenizer_mirrors_the_local_backend() -> None:
    # SmolLM2: <|endoftext|> in the vocabulary, BOS <|im_start|> not added by the tokenizer
    st = from_tokenizer(
        _tok([DOC_SEPARATOR, "<|im_start|>", "<|im_end|>"], "<|im_start|>", "<|im_end|>"), False
    )
    assert (st.separator, st.empty_context, st.adds_bos) == (DOC_SEPARATOR, "<|im_start|>", False)
    # Llama-style: BOS added by the tokenizer itself, so an empty context needs nothing more
    st = from_tokenizer(_tok(["<s>", "</s>"], "<s>", "</s>"), True)
    assert (st.separator, st.empty_context) == ("</s>", "")
    # no BOS: EOS stands in (as engine/hf/ does)
    st = from_tokenizer(_tok(["<eos>"], None, "<eos>"), False)
    assert st.empty_context == "<eos>"


async def test_a_server_without_vllm_tokenize_names_nothing() -> None:
    s = start_server()
    try:
        assert await from_vllm(s.base_url, "m", {"Authorization": "Bearer x"}, timeout=5) is None
    finally:
        stop_server(s)


class _VLLMTokenizer(BaseHTTPRequestHandler):
    """vLLM's /tokenize (no BOS added; every other text one token) and a /tokenizer_info whose BOS
    text echoes the key and whose EOS text holds a lone surrogate (JSON-escaped, as a server
    would send it)."""

    def log_message(self, *a: object) -> None:
        pass

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = req["prompt"]
        # the document separator is two tokens here, so the EOS text becomes the separator
        self._send(
            json.dumps(
                {"tokens": [] if text == "" else [7, 8] if text == DOC_SEPARATOR else [7]}
            ).encode()
        )

    def do_GET(self) -> None:
        self._send(b'{"bos_token": "<s>' + SECRET.encode() + b'", "eos_token": "</s>\\ud83d"}')


SECRET = "sk-test-start-token-0123456789"


async def test_tokenizer_info_is_redacted_and_repaired_before_use() -> None:
    # the start token's text is sent as context and stored with the run: a server that puts the
    # key (or a lone surrogate) there must not get it into either
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _VLLMTokenizer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        b = OpenAIBackend("m", base_url=f"http://127.0.0.1:{httpd.server_port}/v1", api_key=SECRET)
        await b._learn_start()
        st = b.start_tokens()
        assert st is not None and st.empty_context is not None
        assert SECRET not in st.empty_context and st.empty_context == f"<s>{REDACTED}"
        assert st.separator == "</s>\ufffd"  # the EOS text, its lone surrogate repaired
    finally:
        httpd.shutdown()
