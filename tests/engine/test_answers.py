"""The answer-token rule, checked on hand cases and on a real tokenizer's vocabulary."""

from __future__ import annotations

import json

from llmscope.engine.answers import answer_ids, match_answer
from tests.helpers.cli import cli
from tests.helpers.paths import shared_path


def test_rule_on_hand_cases():
    yes_no = ["yes", "no"]
    assert match_answer("Yes", yes_no) == "yes"
    assert match_answer(" yes", yes_no) == "yes"
    assert match_answer('"Yes', yes_no) == "yes"
    assert match_answer("YES!", yes_no) == "yes"
    assert match_answer("\u2581No", yes_no) == "no"
    assert match_answer("Yesterday", yes_no) is None
    assert match_answer("nope", yes_no) is None
    assert match_answer("n", yes_no) is None
    # a digit inside does not matter for alphabetic answers (only a-z is kept)
    assert match_answer("yes1", yes_no) == "yes"
    # numeric labels keep digits
    assert match_answer(" 3", ["1", "2", "3"]) == "3"
    assert match_answer("3.", ["1", "2", "3"]) == "3"
    assert match_answer("13", ["1", "2", "3"]) is None


def _bytes_to_unicode() -> dict[str, int]:
    # GPT-2 byte-level alphabet, written out independently of transformers.
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=False)}


def test_tokens_command_on_qwen25():
    tok_dir = shared_path("tokenizers", "qwen2.5")
    proc = cli("tokens", "--tokenizer", str(tok_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    # Independent computation straight from vocab.json.
    vocab = json.loads((tok_dir / "vocab.json").read_text(encoding="utf-8"))
    dec = _bytes_to_unicode()
    expected: dict[str, list[int]] = {"yes": [], "no": []}
    for piece, i in vocab.items():
        text = bytes(dec[ch] for ch in piece).decode("utf-8", errors="replace")
        key = "".join(c for c in text.lower() if "a" <= c <= "z")
        if key in expected:
            expected[key].append(i)
    assert sorted(got["yes"]) == sorted(expected["yes"])
    assert sorted(got["no"]) == sorted(expected["no"])
    # the familiar ones are there: "Yes", " yes", "No", " no"
    for piece in ("Yes", "Ġyes", "No", "Ġno"):
        assert vocab[piece] in got["yes"] + got["no"]


def test_answer_ids_groups():
    vocab = [(0, "yes"), (1, " No"), (2, "maybe"), (3, '"Yes'), (4, "no.")]
    assert answer_ids(vocab, ["yes", "no"]) == {"yes": [0, 3], "no": [1, 4]}
