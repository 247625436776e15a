"""llmscope: a terminal microscope for the behaviour of large language models."""

__version__ = "0.1.0"
