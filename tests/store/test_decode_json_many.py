"""`decode_json_many` decodes a column exactly as `decode_json` decodes each value."""

from __future__ import annotations

import math

import pytest

from llmscope.store.codec import decode_json, decode_json_many

CASES = [
    ['{"yes": 0.25, "no": 0.7}', None, float("nan"), '{"yes": 1e-300, "no": 0}'],
    ['{"a": NaN}', "[1, 2]", "not json", '"text"', ""],  # the stdlib's NaN; unparsable -> default
    ['{"k": 123456789012345678901234}', '{"yes": 0.5}'],  # beyond 64 bits: the stdlib keeps the int
    ['{"k": 18446744073709551615}', b'{"b": 1}', {"already": "decoded"}],
    [],
]


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("values", CASES)
def test_same_values_as_one_by_one(values: list[object]) -> None:
    got = decode_json_many(values, default="DEFAULT")
    want = [decode_json(v, "DEFAULT") for v in values]
    assert len(got) == len(want)
    assert all(_same(g, w) for g, w in zip(got, want, strict=True)), (got, want)


def test_values_by_hand() -> None:
    got = decode_json_many(['{"yes": 0.25}', None, '{"k": 123456789012345678901234}', "x"])
    assert got[0] == {"yes": 0.25} and got[1] is None and got[3] is None
    assert got[2] == {"k": 123456789012345678901234} and isinstance(got[2]["k"], int)


def test_wide_integer_test_matches_the_per_text_rule() -> None:
    """The numpy digit-run scan flags exactly the texts the per-value regex rule flags."""
    import random
    import re

    from llmscope.store.codec import _has_wide_int

    rule = re.compile(r"-?[0-9]{19,}")

    def by_rule(t: str) -> bool:
        return any(not (-(2**63) <= int(m) <= 2**64 - 1) for m in rule.findall(t))

    edge = [
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "--9223372036854775809",
        "\ud800 18446744073709551616",
        "0.0010285373829854506",
        "",
    ]
    rng = random.Random(0)
    texts = edge + [
        "".join(
            rng.choice("0123456789-x é\n") if rng.random() < 0.3 else rng.choice("0123456789")
            for _ in range(rng.randint(0, 60))
        )
        for _ in range(3000)
    ]
    assert [by_rule(t) for t in edge[:4]] == [False, True, False, True]
    assert [_has_wide_int(t) for t in texts] == [by_rule(t) for t in texts]
