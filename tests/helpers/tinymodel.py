"""A tiny random-weight Llama plus a real tokenizer, for fast backend tests.

    from tests.helpers.tinymodel import make_tiny_model
    model, tok = make_tiny_model(tmp_path)                  # Qwen2.5 tokenizer if shared, else trained
    model, tok = make_tiny_model(tmp_path, vocab="trained")  # always the on-the-fly BPE
    backend = HFBackend(tiny_spec(tmp_path), model=model, tokenizer=tok, device="cpu", dtype="float32")

The model has 2 layers, hidden 64 and an untied head; with `save=True` model and
tokenizer are also written to `tmp_path / "tiny-llama"`, so `hf:<that folder>` loads
the same thing. Weights are
random but deterministic (seeded) and scaled so next-token distributions are far
from uniform; the chat template renders a system prompt shared by every prompt.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

from tests.helpers.paths import SHARED

QWEN_TOKENIZER = SHARED / "tokenizers" / "qwen2.5"

CHATML_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are a tiny test model. Answer every question briefly and truthfully.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] != 'system' %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_WORDS = (
    "yes no Yes No YES NO true false True False maybe a b c d A B C D the a an is are was were "
    "cat dog bird fish tree water fire stone sky sun moon river mountain city house car road "
    "Paris London Rome Berlin capital of France England Italy Germany red green blue small big "
    "can fly swim run eat drink sleep think people animals usually always never sometimes "
    "question answer option correct wrong which what who where when why how one two three four"
).split()


def _training_corpus() -> list[str]:
    import random

    rng = random.Random(0)
    lines = [" ".join(_WORDS)]
    for _ in range(2000):
        n = rng.randint(3, 12)
        s = " ".join(rng.choice(_WORDS) for _ in range(n))
        lines.append(s.capitalize() + rng.choice([".", "?", "!", ""]))
        lines.append(
            "Question: "
            + s
            + "? Answer: "
            + rng.choice(["yes", "no", "Yes", "No", "A", "B", "C", "D"])
        )
    return lines


def train_bpe(corpus: list[str], vocab_size: int, special_tokens: list[str]) -> Any:
    """A byte-level BPE `tokenizers.Tokenizer` trained on `corpus`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(corpus, trainer=trainer)
    return tk


@functools.cache
def _trained_tokenizer_json() -> str:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    return str(train_bpe(_training_corpus(), 600, specials).to_str())


def _trained_tokenizer() -> Any:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained_tokenizer_json()),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tok.chat_template = CHATML_TEMPLATE
    return tok


@functools.cache
def _qwen_tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(QWEN_TOKENIZER))


def load_tokenizer(vocab: str = "auto", chat_template: bool = True) -> Any:
    """A fresh tokenizer: "qwen" (shared Qwen2.5), "trained" (tiny BPE) or "auto" (qwen if present)."""
    if vocab not in ("auto", "qwen", "trained"):
        raise ValueError(f"vocab must be 'auto', 'qwen' or 'trained', not {vocab!r}")
    if vocab == "qwen" or (vocab == "auto" and (QWEN_TOKENIZER / "vocab.json").is_file()):
        if not (QWEN_TOKENIZER / "vocab.json").is_file():
            raise FileNotFoundError(f"the shared Qwen2.5 tokenizer is missing: {QWEN_TOKENIZER}")
        tok = copy.deepcopy(_qwen_tokenizer())
    else:
        tok = _trained_tokenizer()
    if not chat_template:
        tok.chat_template = None
    return tok


def padded_vocab(tok: Any) -> int:
    """len(tok) rounded up to a multiple of 64, like real checkpoints: ids past len(tok) are
    never produced."""
    return len(tok) + (-len(tok)) % 64


def tiny_dims(vocab_size: int, hidden: int = 64, layers: int = 2) -> dict[str, int]:
    """The sizes of a tiny test model's config: 4 attention heads over 2 key/value heads and an
    MLP twice as wide as `hidden`."""
    return {
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "intermediate_size": hidden * 2,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }


def tiny_family_model(kind: str, tok: Any, seed: int = 3, **extra: Any) -> Any:
    """A tiny random fp32 model of another family ("qwen2", "gemma3" text, or "mistral") on
    `tok`'s vocabulary; `extra` goes to its config (sliding_window, ...)."""
    import torch
    import transformers as tf

    common: dict[str, Any] = {
        **tiny_dims(padded_vocab(tok)),
        "pad_token_id": tok.pad_token_id,
        **extra,
    }
    if kind == "qwen2":
        cfg, cls = tf.Qwen2Config(**common), tf.Qwen2ForCausalLM
    elif kind == "gemma3":
        cfg = tf.Gemma3TextConfig(
            head_dim=16, layer_types=["sliding_attention", "full_attention"], **common
        )
        cls = tf.Gemma3ForCausalLM
    else:
        cfg, cls = tf.MistralConfig(**common), tf.MistralForCausalLM
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls(cfg).float().eval()


def make_tiny_model(
    tmp_path: str | Path,
    vocab: str = "auto",
    chat_template: bool = True,
    *,
    seed: int = 0,
    layers: int = 2,
    hidden: int = 64,
    init_std: float = 0.4,
    save: bool = False,
) -> tuple[Any, Any]:
    """(model, tokenizer): a random-weight 2-layer Llama whose vocabulary covers the tokenizer.

    `vocab`: "auto" (shared Qwen2.5 tokenizer when ../shared has it, else a BPE trained on
    the fly), "qwen" or "trained". `chat_template=False` drops the chat template. The model is
    fp32, in eval mode, on CPU; with `save` both are also written to `tmp_path/"tiny-llama"`.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = load_tokenizer(vocab, chat_template)
    n_vocab = padded_vocab(tok)
    cfg = LlamaConfig(
        **tiny_dims(n_vocab, hidden, layers),
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        initializer_range=0.02,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
        with torch.no_grad():
            # Larger weights than a fresh init so the next-token distribution is peaked.
            for p in model.parameters():
                if p.dim() >= 2:
                    p.normal_(0.0, init_std / max(1.0, p.shape[-1] ** 0.5) * 8.0)
    model = model.float().eval()
    if save:
        out = Path(tmp_path) / "tiny-llama"
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        tok.save_pretrained(out)
    return model, tok


def tiny_spec(tmp_path: str | Path) -> Any:
    """A ModelSpec naming the saved tiny model folder (for describe(); weights are passed in)."""
    from llmscope.engine.models import ModelSpec

    p = Path(tmp_path) / "tiny-llama"
    return ModelSpec("hf", str(p), str(p), None, label="tiny-llama")


def tiny_backend(folder: str | Path, model: Any, tok: Any, **options: Any) -> Any:
    """An HFBackend in fp32 on the CPU over the tiny model saved in `folder` (weights passed in);
    `options` go to HFBackend (batch_size, max_length, ...)."""
    from llmscope.engine.hf import HFBackend

    return HFBackend(
        tiny_spec(folder), model=model, tokenizer=tok, device="cpu", dtype="float32", **options
    )


def run_plan(plan: Any, backend: Any, store: Any, reporter: Any = None) -> Any:
    """Run `plan` on `backend` into `store` to its end, then close the backend; the run's
    progress as the Runner returns it."""
    import asyncio

    from llmscope.engine.runner import Runner

    async def main() -> Any:
        try:
            return await Runner(plan, backend, store, reporter).run()
        finally:
            await backend.aclose()

    return asyncio.run(main())


def tiny_run_args(spec: str | Path, model: str | Path, db: str | Path, *extra: str) -> list[str]:
    """The arguments of a quiet `llmscope run` of a suite on the saved model folder `model` in
    full precision on the CPU (the same numbers on every machine), without the report."""
    return ["run", "--suite", str(spec), "--model", f"hf:{model}", "--db", str(db)] + [
        *("--dtype", "float32", "--device", "cpu", *extra, "--no-report", "--quiet")
    ]
