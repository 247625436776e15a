"""Start tokens as text: from a local tokenizer, and from a server that has no vLLM /tokenize
(the real vLLM answers are checked in tests/engine/test_server_vllm.py)."""

from __future__ import annotations

from types import SimpleNamespace

from llmscope.engine.start_tokens import DOC_SEPARATOR, from_tokenizer, from_vllm, server_root
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
