"""OpenAI-compatible servers (OpenAI, vLLM, llama.cpp, Ollama...): the backend and its parts."""

from llmscope.engine.openai.backend import OpenAIBackend

__all__ = ["OpenAIBackend"]
