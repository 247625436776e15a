"""Edge cases: edge binning, number normalisation, declared task options, minimal-pair context.

Expected values are worked out by hand in the comments.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import duckdb
import pytest

from llmscope.analysis.calibration import reliability  # noqa: E402
from llmscope.cli import main  # noqa: E402
from llmscope.data.suites import SuiteError, load_suite  # noqa: E402
from llmscope.engine.normalize import exact_match, normalise  # noqa: E402
from llmscope.engine.tasks.minpairs import MinPairsTask, resolve_context  # noqa: E402
from llmscope.engine.tasks.options import TaskOptionError, validate_task_options  # noqa: E402
from llmscope.engine.types import Item, Work  # noqa: E402
from tests.helpers.cli import tiny_model_dir, write_choice_suite  # noqa: E402
from tests.helpers.fakes import TableBackend  # noqa: E402
from tests.helpers.paths import SHARED


# -- reliability bins at exact edges -------------------------------------------------------
def test_edge_confidences_ten_bins():
    # Ten bins: 0.3 belongs to [0.3, 0.4), not [0.2, 0.3) (linspace's edge is 0.30000000000000004).
    # bin [0.2,0.3): two items at 0.25, both wrong -> |0 - .25| = .25
    # bin [0.3,0.4): two items at 0.30, both right -> |1 - .30| = .70
    # bin [0.6,0.7): 0.6 wrong -> .6 ; bin [0.7,0.8): 0.7 right -> .3
    # ECE = (2*.25 + 2*.70 + .6 + .3) / 6 = 2.8 / 6
    conf = [0.25, 0.25, 0.3, 0.3, 0.6, 0.7]
    corr = [0, 0, 1, 1, 0, 1]
    r = reliability(conf, corr, n_bins=10)
    assert r.ece == pytest.approx(2.8 / 6)
    assert list(r.bins["count"]) == [0, 0, 2, 2, 0, 0, 1, 1, 0, 0]
    assert r.bins["lo"][3] == 0.3  # the printed edge is the decimal one
    assert r.mce == pytest.approx(0.7)


def test_edge_confidences_five_bins_and_ends():
    # Five bins: 0.6 starts [0.6, 0.8). Two at .5 right (gap .5), two at .6 wrong (gap .6),
    # 0.0 right in the first bin (gap 1), 1.0 right in the last, closed bin (gap 0).
    # ECE = (2*.5 + 2*.6 + 1 + 0) / 6 = 3.2 / 6
    conf = [0.5, 0.5, 0.6, 0.6, 0.0, 1.0]
    corr = [1, 1, 0, 0, 1, 1]
    r = reliability(conf, corr, n_bins=5)
    assert list(r.bins["count"]) == [1, 0, 2, 2, 1]
    assert r.ece == pytest.approx(3.2 / 6)


def test_issue_hand_example_matches_definition():
    # The definition for distinct confidences: mean over items of |p_i - acc among items with p_i|.
    conf = [0.3, 0.3, 0.3, 0.2, 0.2, 0.7, 0.7, 0.6, 0.6, 0.6]
    corr = [1, 1, 1, 0, 0, 0, 0, 1, 1, 1]
    by_hand = (3 * 0.7 + 2 * 0.2 + 2 * 0.7 + 3 * 0.4) / 10  # = 0.51
    assert reliability(conf, corr, n_bins=10).ece == pytest.approx(by_hand)


# -- number normalisation -------------------------------------------------------------------
def test_comma_merges_only_thousands():
    assert normalise("1,000")[0] == "1000"
    assert normalise("1,000,000 people")[0] == "1000000 people"
    out, trace = normalise("3,4")
    assert out == "3 4"
    assert dict(trace)["numbers"] == "3,4"  # not a thousands separator: left for punctuation
    assert dict(trace)["punctuation"] == "3 4"  # which splits it, visibly
    assert exact_match("3,4", ["34"]) == 0.0
    assert exact_match("3,4", ["3 4"]) == 1.0
    assert normalise("12,5")[0] == "12 5"  # a decimal comma is two numbers, never 125
    assert normalise("1,0000")[0] == "1 0000"


# -- declared task options ------------------------------------------------------------------
def test_unknown_and_ill_typed_options_are_errors():
    with pytest.raises(
        TaskOptionError,
        match=r"unknown option 'permutation' for task 'choice'; allowed: .*permutations",
    ):
        validate_task_options("choice", {"permutation": 2})
    with pytest.raises(
        TaskOptionError, match=r"'permutations' of task 'choice' must be an integer"
    ):
        validate_task_options("choice", {"permutations": "2"})
    with pytest.raises(TaskOptionError, match=r"'top_k' of task 'yesno' must be >= 1"):
        validate_task_options("yesno", {"top_k": 0})
    with pytest.raises(
        TaskOptionError, match=r"'mode' of task 'constrained' must be one of auto, loglik, generate"
    ):
        validate_task_options("constrained", {"mode": "sample"})
    assert validate_task_options("generation", {"temperature": 1, "n": 3, "stop": "\n"})


def test_suite_spec_option_error_names_file_and_field(tmp_path):
    spec = write_choice_suite(tmp_path, 2)
    spec.write_text(spec.read_text() + "  permutatons: 3\n")
    with pytest.raises(SuiteError) as e:
        load_suite(spec)
    assert (
        "suite.yaml" in str(e.value)
        and "task_options" in str(e.value)
        and "permutatons" in str(e.value)
    )


def test_cli_bad_opt_is_one_line_error(tmp_path, capsys):
    spec = write_choice_suite(tmp_path, 2)
    rc = main(
        ["run", "--suite", str(spec), "--db", str(tmp_path / "x.duckdb"), "--opt", "alpha=fast"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "option 'alpha' of task 'choice' must be a finite number" in err


def _variants(db: Path) -> list[tuple[str, str]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return sorted(con.execute("SELECT item_id, variant FROM results").fetchall())


@pytest.mark.slow
def test_permutations_from_cli_and_spec_alike(tmp_path):
    # Two items, one template "q", permutations=2 -> variants q, q@p1, q@p2 per item.
    model = tiny_model_dir(tmp_path)
    spec = write_choice_suite(tmp_path / "s", 2)
    want = [(f"c{i}", v) for i in range(2) for v in ("q", "q@p1", "q@p2")]
    db1 = tmp_path / "cli.duckdb"
    assert (
        main(
            [
                "run",
                "--suite",
                str(spec),
                "--model",
                f"hf:{model}",
                "--db",
                str(db1),
                "--threads",
                "1",
                "--opt",
                "permutations=2",
                "--quiet",
                "--no-report",
            ]
        )
        == 0
    )
    assert _variants(db1) == want
    spec2 = write_choice_suite(tmp_path / "s2", 2)
    spec2.write_text(spec2.read_text() + "  permutations: 2\n")
    db2 = tmp_path / "spec.duckdb"
    assert (
        main(
            [
                "run",
                "--suite",
                str(spec2),
                "--model",
                f"hf:{model}",
                "--db",
                str(db2),
                "--threads",
                "1",
                "--quiet",
                "--no-report",
            ]
        )
        == 0
    )
    assert _variants(db2) == want


# -- minimal-pair context ---------------------------------------------------------------------
GOOD, BAD = "The dog runs.", "The dog run."


def _mp_work() -> Work:
    item = Item(item_id="p1", fields={"sentences": [GOOD, BAD]}, text=GOOD)
    return Work(item=item, variant="default", prompt="", gold=None)


def _table(ctx: str) -> TableBackend:
    lp = math.log
    return TableBackend(
        {
            (ctx, GOOD): [
                ("The", lp(0.1)),
                (" dog", lp(0.01)),
                (" runs", lp(0.02)),
                (".", lp(0.5)),
            ],
            (ctx, BAD): [("The", lp(0.1)), (" dog", lp(0.01)), (" run", lp(0.04)), (".", lp(0.25))],
        }
    )


class _Tok:
    all_special_tokens = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    eos_token = "<|im_end|>"

    def get_added_vocab(self):
        return {}


def test_context_modes_resolve_and_are_recorded():
    b = _table("<|endoftext|>")
    b.tok = _Tok()  # type: ignore[attr-defined]
    b.add_bos = False  # type: ignore[attr-defined]
    # auto picks the document separator, not EOS (<|im_end|>) nor BOS
    assert resolve_context("auto", "", b)["text"] == "<|endoftext|>"
    b.add_bos = True  # type: ignore[attr-defined]
    assert resolve_context("auto", "", b)["mode"] == "bos"
    b.add_bos = False  # type: ignore[attr-defined]
    task = MinPairsTask({})
    assert task.describe()["context"] == "auto"  # part of the run's identity
    res = asyncio.run(task.score(_mp_work(), b))
    assert res.extra["context"]["mode"] == "eos" and res.extra["context"]["text"] == "<|endoftext|>"
    assert b.calls[0][1][0][0] == ("<|endoftext|>", GOOD)
    # log P: good = ln(.1*.01*.02*.5), bad = ln(.1*.01*.04*.25): equal products, a tie is never credited
    assert res.extra["logprob_diff"] == pytest.approx(0.0, abs=1e-12)
    assert res.correct == 0.0


def test_context_none_drops_first_token_and_text_prefix():
    # none: first token ("The") unscored: good = ln(.01*.02*.5), bad = ln(.01*.04*.25) (a tie again)
    res = asyncio.run(MinPairsTask({"context": "none"}).score(_mp_work(), _table("")))
    assert res.option_scores[GOOD]["logprob"] == pytest.approx(math.log(0.01 * 0.02 * 0.5))
    assert res.option_scores[GOOD]["n_tokens"] == 3
    assert res.extra["context"]["mode"] == "none"
    res = asyncio.run(
        MinPairsTask({"context": "text", "context_text": "Story:"}).score(
            _mp_work(), _table("Story:")
        )
    )
    assert res.extra["context"] == {"mode": "text", "text": "Story:", "why": "option"}
    with pytest.raises(TaskOptionError, match="context_text"):
        MinPairsTask({"context": "text"})
    with pytest.raises(TaskOptionError, match="must be one of auto, eos, bos, none, text"):
        MinPairsTask({"context": "<s>"})


@pytest.mark.slow
def test_context_on_real_tokenizer_matches_direct_forward(tmp_path):
    """Tiny model with the Qwen2.5 tokenizer: auto context = <|endoftext|>, scored as a direct
    transformers forward pass over [<|endoftext|>] + sentence tokens computes it."""
    if not (SHARED / "tokenizers" / "qwen2.5").is_dir():
        pytest.skip(f"Qwen2.5 tokenizer not found under {SHARED}")
    import torch

    from llmscope.engine.hf import HFBackend
    from tests.helpers.tinymodel import make_tiny_model, tiny_spec

    model, tok = make_tiny_model(tmp_path)
    backend = HFBackend(
        tiny_spec(tmp_path), model=model, tokenizer=tok, device="cpu", dtype="float32"
    )

    async def go():
        try:
            return await MinPairsTask({}).score(_mp_work(), backend)
        finally:
            await backend.aclose()

    res = asyncio.run(go())
    assert res.extra["context"]["text"] == "<|endoftext|>"
    sep = tok.convert_tokens_to_ids("<|endoftext|>")
    ids = [sep, *tok(GOOD, add_special_tokens=False).input_ids]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    want = sum(float(lp[i - 1, ids[i]]) for i in range(1, len(ids)))
    assert res.option_scores[GOOD]["logprob"] == pytest.approx(want, rel=1e-4)
