"""Tasks on a tiny random-weight Llama (HFBackend) against direct transformers computations."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from llmscope.engine.answers import match_answer  # noqa: E402
from llmscope.engine.hf import HFBackend  # noqa: E402
from llmscope.engine.models import ModelSpec  # noqa: E402
from llmscope.engine.tasks.choice import ChoiceTask  # noqa: E402
from llmscope.engine.tasks.constrained import ConstrainedTask  # noqa: E402
from llmscope.engine.tasks.generation import GenerationTask  # noqa: E402
from llmscope.engine.tasks.minpairs import MinPairsTask  # noqa: E402
from llmscope.engine.tasks.rating import RatingTask  # noqa: E402
from llmscope.engine.types import Item, Work  # noqa: E402
from tests.helpers.tinymodel import tiny_dims, train_bpe  # noqa: E402

CORPUS = [
    "The cat sleeps on the mat. The cats sleep on the mat.",
    "Q: What colour is the sky? A: blue green red yellow",
    "Answer: TRUE FALSE POSSIBLE IMPOSSIBLE 1 2 3 4 5 12.25 10",
    "The keys to the cabinet are on the table. Nobody has ever seen a ghost.",
    "How plausible is it? Rate from 1 to 5. Water is wet.",
]


@pytest.fixture(scope="module")
def tiny():
    tk = train_bpe(CORPUS * 5, 300, ["<s>", "</s>", "<pad>"])
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        **tiny_dims(len(tok), hidden=32),
        max_position_embeddings=256,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    # sharpen the random model so that predictions differ clearly between options
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    return model, tok


@pytest.fixture
async def backend(tiny):
    model, tok = tiny
    be = HFBackend(
        ModelSpec(backend="hf", name="tiny"),
        device="cpu",
        dtype="float32",
        model=model,
        tokenizer=tok,
    )
    yield be
    await be.aclose()


def logprobs_of(model, ids: list[int]) -> list[float]:
    """log P(ids[i] | ids[:i]) for i >= 1, from one direct forward pass."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    return [float(lp[i - 1, ids[i]]) for i in range(1, len(ids))]


def direct_loglik(model, tok, context: str, cont: str) -> float:
    ctx = tok(context, add_special_tokens=False).input_ids
    whole = tok(context + cont, add_special_tokens=False).input_ids
    assert whole[: len(ctx)] == ctx
    return math.fsum(logprobs_of(model, whole)[len(ctx) - 1 :])


def work(prompt, gold, options=None, fields=None, item_id="x"):
    item = Item(item_id=item_id, fields=fields or {}, gold=gold, options=options)
    return Work(item=item, variant="v", prompt=prompt, gold=gold, options=options)


async def test_choice_on_tiny_model(tiny, backend):
    model, tok = tiny
    prompt = "Q: What colour is the sky? A:"
    opts = ["blue", "green", "red yellow"]
    task = ChoiceTask({"content_free": ["N/A"], "domain_prompt": "Answer:"})
    tpl = "Q: {q} A:"
    task.options.update(templates={"v": tpl}, text_field="q")
    r = await task.score(work(prompt, "blue", opts, {"q": "What colour is the sky?"}), backend)
    raw = [direct_loglik(model, tok, prompt, " " + o) for o in opts]
    for o, v in zip(opts, raw, strict=True):
        assert r.option_scores[o]["logprob"] == pytest.approx(v, abs=1e-4)
    z = sum(math.exp(v) for v in raw)
    assert r.probs["blue"] == pytest.approx(math.exp(raw[0]) / z, rel=1e-3)
    assert r.prediction == opts[max(range(3), key=lambda i: raw[i])]
    dom = [direct_loglik(model, tok, "Answer:", " " + o) for o in opts]
    for o, v, d in zip(opts, raw, dom, strict=True):
        assert r.option_scores[o]["pmi"] == pytest.approx(v - d, abs=1e-4)
    cf = [direct_loglik(model, tok, "Q: N/A A:", " " + o) for o in opts]
    pcf = [math.exp(v) / sum(math.exp(c) for c in cf) for v in cf]
    cal = [math.exp(v) / z / q for v, q in zip(raw, pcf, strict=True)]
    assert r.option_scores["green"]["calibrated"] == pytest.approx(cal[1] / sum(cal), rel=1e-3)


async def test_minpairs_on_tiny_model(tiny, backend):
    model, tok = tiny
    good, bad = "The cats sleep on the mat.", "The cats sleeps on the mat."
    fields = {"sentences": [good, bad], "critical": [[9, 14], [9, 15]]}
    # context "bos" explicitly: this test checks the BOS-conditioned path against a direct forward
    r = await MinPairsTask({"context": "bos"}).score(work("", None, fields=fields), backend)
    per_tok = {}
    for s in (good, bad):
        ids = [tok.bos_token_id, *tok(s, add_special_tokens=False).input_ids]
        per_tok[s] = logprobs_of(model, ids)
        assert r.option_scores[s]["logprob"] == pytest.approx(math.fsum(per_tok[s]), abs=1e-4)
    assert r.correct == (1.0 if sum(per_tok[good]) > sum(per_tok[bad]) else 0.0)
    # tokens overlapping the critical span, found independently with the tokenizer's offsets
    for s, (a, b), crit in zip((good, bad), fields["critical"], r.extra["critical"], strict=True):
        offs = tok(s, add_special_tokens=False, return_offsets_mapping=True).offset_mapping
        idx = [i for i, (x, y) in enumerate(offs) if x < b and y > a]
        assert crit["aligned"] and crit["token_indices"] == idx
        assert crit["surprisal_nats"] == pytest.approx([-per_tok[s][i] for i in idx], abs=1e-4)
        assert crit["surprisal_bits"] == pytest.approx(
            [-per_tok[s][i] / math.log(2) for i in idx], abs=1e-4
        )


async def test_rating_on_tiny_model(tiny, backend):
    model, tok = tiny
    labels = ["1", "2", "3", "4", "5"]
    prompt = "How plausible is it? Rate from 1 to 5. Water is wet. Rating:"
    r = await RatingTask({"answers": labels, "chat": True}).score(work(prompt, "4"), backend)
    with torch.no_grad():
        p = torch.softmax(model(torch.tensor([tok(prompt).input_ids])).logits[0, -1].float(), -1)
    mass = dict.fromkeys(labels, 0.0)
    special = set(tok.all_special_ids)
    for i in range(len(tok)):
        a = match_answer(tok.decode([i]), labels)
        if a is not None and i not in special:
            mass[a] += float(p[i])
    total = sum(mass.values())
    assert r.extra["label_mass"] == pytest.approx(total, rel=1e-4)
    expected = sum((k + 1) * mass[lab] / total for k, lab in enumerate(labels))
    assert r.extra["expected"] == pytest.approx(expected, rel=1e-4)
    assert r.prediction == max(labels, key=lambda lab: mass[lab])
    assert r.prompt == prompt  # no chat template on the tiny tokenizer


async def test_constrained_and_generation_on_tiny_model(tiny, backend):
    model, tok = tiny
    prompt = "Answer: TRUE or FALSE?"
    r = await ConstrainedTask({}).score(work(prompt, "TRUE", ["TRUE", "FALSE"]), backend)
    raw = {o: direct_loglik(model, tok, prompt, " " + o) for o in ("TRUE", "FALSE")}
    assert r.extra["mode"] == "loglik"
    assert r.prediction == max(raw, key=raw.get)
    assert r.option_scores["FALSE"]["logprob"] == pytest.approx(raw["FALSE"], abs=1e-4)

    gprompt = "Q: What colour is the sky? A:"
    g = await GenerationTask({"max_new_tokens": 8, "chat": False}).score(
        work(gprompt, "blue"), backend
    )
    ids = tok(gprompt, add_special_tokens=False).input_ids
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id
        )
    text = tok.decode(out[0, len(ids) :], skip_special_tokens=True)
    assert g.extra["raw"][0] == text[: len(g.extra["raw"][0])]
    assert g.prediction == text.lstrip().split("\n")[0]
    assert g.correct == (1.0 if g.prediction.strip().lower() == "blue" else 0.0)
