"""Local Hugging Face models (transformers/torch): the backend and its parts."""

from llmscope.engine.hf.backend import HFBackend
from llmscope.engine.hf.loading import load_model

__all__ = ["HFBackend", "load_model"]
