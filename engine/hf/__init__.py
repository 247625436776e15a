"""Local Hugging Face models (transformers/torch): the backend and its parts."""

from llmscope.engine.hf.backend import HFBackend

__all__ = ["HFBackend"]
