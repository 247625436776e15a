"""A causal LM wrapped around another so that a test can change one thing its forward does
(fail above a batch size, drop the attention mask, lack `logits_to_keep`)."""

from __future__ import annotations

from typing import Any

import torch


class LMWrapper(torch.nn.Module):
    """`inner` with its config; a subclass overrides `forward` (or adds methods) to misbehave."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner
        self.config = inner.config

    def forward(self, *args: Any, **kw: Any) -> Any:
        return self.inner(*args, **kw)
