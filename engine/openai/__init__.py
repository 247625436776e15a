"""OpenAI-compatible servers (OpenAI, vLLM, llama.cpp, Ollama...): the backend and its parts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmscope.engine.openai.endpoints import OPENAI_URL, expand_base_urls, public_url

if TYPE_CHECKING:
    from llmscope.engine.openai.backend import OpenAIBackend

__all__ = ["OPENAI_URL", "OpenAIBackend", "expand_base_urls", "public_url"]


def __getattr__(name: str) -> Any:
    # The backend imports the `openai` package (~0.5 s): only a run through a server needs it,
    # not one that merely checks endpoints (every local-model run does).
    if name == "OpenAIBackend":
        from llmscope.engine.openai.backend import OpenAIBackend

        return OpenAIBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
