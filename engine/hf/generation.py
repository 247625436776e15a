"""Generation: text from the local model (greedy or sampled, stop strings, n sequences)."""

from __future__ import annotations

from typing import Any

from llmscope.engine.hf.jobs import Job
from llmscope.engine.types import GenerateOut


class Generation:
    """Runs one generate job (state set by `HFBackend.__init__`, engine/hf/backend.py)."""

    tok: Any
    model: Any
    device: str

    def _run_generate(self, batch: list[Job]) -> list[GenerateOut]:
        import torch

        (ids, text, params) = batch[0].payload
        if params.seed is not None:
            torch.manual_seed(int(params.seed))
        inp = torch.tensor([ids], device=self.device)
        do_sample = params.temperature > 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": params.max_new_tokens,
            "do_sample": do_sample,
            "num_return_sequences": params.n,
            "pad_token_id": self.tok.pad_token_id,
        }
        if do_sample:
            kwargs.update(temperature=params.temperature, top_p=params.top_p)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=self.tok)
        out = self.model.generate(inp, attention_mask=torch.ones_like(inp), **kwargs)
        texts = []
        for row in out:
            t = self.tok.decode(row[len(ids) :], skip_special_tokens=True)
            texts.append(t)
        return [
            GenerateOut(texts=texts, prompt=text, n_tokens=len(ids), meta={"do_sample": do_sample})
        ]
