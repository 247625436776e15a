"""ProbEval as the paper runs it: normalised KL, ProtoQA WordNet matching with even splits,
Spearman validation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from llmscope.analysis.probeval import (
    Question,
    gold_cluster_kl,
    kl_divergence,
    question_set,
    score_question,
    spearman_validation,
)
from llmscope.analysis.wordnet_match import WordNetUnavailable, find_wordnet_dir
from tests.helpers.paths import SHARED

HAS_WN = find_wordnet_dir() is not None


def test_kl_normalises_unnormalised_inputs_like_scipy_entropy():
    p = [0.5, 0.3, 0.2]
    q_short = [0.2, 0.2, 0.1]  # sums to 0.5: the reference's model distribution without "wrong"
    raw = float(np.sum(np.array(p) * np.log(np.array(p) / np.array(q_short))))
    assert raw < 0.8  # unnormalised: understated (it can even go negative)
    assert kl_divergence(p, q_short) == pytest.approx(stats.entropy(p, q_short))
    assert kl_divergence([2, 1, 1], [1, 1, 2]) == pytest.approx(stats.entropy([2, 1, 1], [1, 1, 2]))
    assert kl_divergence(p, q_short) >= 0
    assert kl_divergence([1, 0], [0, 1]) == float("inf")
    with pytest.raises(ValueError):
        kl_divergence([1, -1], [1, 1])


def test_spearman_validation_by_hand():
    v = spearman_validation({"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "x": 9.0}, {"a": 10, "b": 20, "c": 40, "d": 30})
    # ranks 1 2 3 4 vs 1 2 4 3: rho = 1 - 6 * (0 + 0 + 1 + 1) / (4 * 15) = 0.8
    assert v.rho == pytest.approx(0.8) and v.n_questions == 4
    with pytest.raises(ValueError):
        spearman_validation({"a": 1}, {"a": 2})
    assert question_set("r2q17") == "r2" and question_set("x") == "all"


def test_gold_cluster_kl_by_hand():
    q = Question("q", "?", {"tea": 3, "coffee": 1}, {"c1": ["tea"], "c2": ["coffee"]})
    # human (3+1, 1+1, 0+1) / 7; model labels c1, wrong -> (1+1, 0+1, 1+1) / 5
    ph, pm = np.array([4, 2, 1]) / 7, np.array([2, 1, 2]) / 5
    assert gold_cluster_kl(q, ["c1", "nonsense"]) == pytest.approx(float(np.sum(ph * np.log(ph / pm))))


@pytest.mark.skipif(not HAS_WN, reason="no WordNet 3.0 files (apt-get install wordnet-base)")
def test_wordnet_score_equals_protoqa_partition_enumeration():
    from itertools import product

    from more_itertools import partitions
    from scipy.optimize import linear_sum_assignment

    from llmscope.analysis.wordnet_match import WordNetMatcher

    m = WordNetMatcher()

    def brute(a: str, b: str) -> float:  # the ProtoQA definition, enumerated
        ta, tb = m._tokens(a), m._tokens(b)
        if not ta or not tb:
            return 0.0
        best = 0.0
        for pa, pb in product(partitions(ta), partitions(tb)):
            pa_s, pb_s = [" ".join(x) for x in pa], [" ".join(x) for x in pb]
            mat = np.array([[1.0 if x == y or set(m.wn.synsets(x.replace(" ", "_"))) & set(
                m.wn.synsets(y.replace(" ", "_"))) else 0.0 for y in pb_s] for x in pa_s])
            r, c = linear_sum_assignment(-mat)
            best = max(best, mat[r, c].sum() / max(mat.shape))
        return best

    pairs = [("car", "automobile"), ("taxi driver", "cab driver"), ("big red car", "automobile"),
             ("hot dog stand", "frankfurter"), ("evening", "night"), ("movie theater", "cinema"),
             ("police officer", "cop"), ("the dog", "cat"), ("dusk", "nightfall evening")]
    for a, b in pairs:
        assert m.score(a, b) == pytest.approx(brute(a, b)), (a, b)
    assert m.score("car", "automobile") == 1.0 and m.score("big red car", "automobile") == 0.5


@pytest.mark.skipif(not HAS_WN, reason="no WordNet 3.0 files (apt-get install wordnet-base)")
def test_answers_split_evenly_between_tied_clusters():
    from llmscope.analysis.wordnet_match import WordNetMatcher

    q = Question("q", "?", {"car": 4, "automobile": 2, "bus": 2},
                 {"c_car": ["car"], "c_auto": ["automobile"], "c_bus": ["bus"]})
    sc = score_question(q, ["auto", "bus", "zzzz"], matcher=WordNetMatcher())
    t = sc.table.set_index("cluster")
    # "auto" shares a synset with both car and automobile: half to each
    assert t.loc["c_car", "model_count"] == 0.5 and t.loc["c_auto", "model_count"] == 0.5
    assert t.loc["c_bus", "model_count"] == 1 and t.loc["wrong", "model_count"] == 1
    ph = (np.array([4, 2, 2, 0]) + 1) / (8 + 4)
    pm = (np.array([0.5, 0.5, 1, 1]) + 1) / (3 + 4)
    assert sc.kl == pytest.approx(stats.entropy(ph, pm))


def test_missing_wordnet_names_the_fix(tmp_path, monkeypatch):
    import llmscope.analysis.wordnet_match as wm

    monkeypatch.setattr(wm, "_DEBIAN_DIR", str(tmp_path / "none"))
    monkeypatch.delenv("WORDNET_DIR", raising=False)
    monkeypatch.setattr(wm, "find_wordnet_dir", lambda d=None: None)
    with pytest.raises(WordNetUnavailable, match="wordnet-base"):
        wm.WordNetMatcher()


@pytest.mark.slow
@pytest.mark.skipif(not HAS_WN or not (SHARED / "data" / "cfc").is_dir(), reason="needs WordNet and shared CFC")
def test_cli_probeval_gpt2xl_question_subset(tmp_path, capsys):
    from llmscope.cli import main

    src = json.loads((SHARED / "data" / "cfc" / "cfc_gpt2xl_oneshot_predictions.json").read_text())
    sub = {"model_answers": {k: v[:20] for k, v in src["model_answers"].items() if k in ("r1q1", "r2q1")}}
    ans = tmp_path / "a.json"
    ans.write_text(json.dumps(sub))
    assert main(["probeval", str(SHARED / "data" / "cfc" / "cfc_dev_targets.jsonl"), str(ans), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["matcher"] == "wordnet" and out["n_questions"] == 2
    assert [r["question_set"] for r in out["by_question_set"]] == ["r1", "r2"]
