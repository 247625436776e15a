"""OpenAI-compatible servers (OpenAI, vLLM, llama.cpp, Ollama...): the backend and its parts."""

from llmscope.engine.openai.backend import OpenAIBackend
from llmscope.engine.openai.endpoints import OPENAI_URL, expand_base_urls, public_url

__all__ = ["OPENAI_URL", "OpenAIBackend", "expand_base_urls", "public_url"]
