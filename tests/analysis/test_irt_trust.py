"""The IRT header warns when the abilities cannot be read: a fit stopped at its cycle limit, or
abilities ordered against the runs' own accuracy (as the full 35-model commonsense fit was)."""

from __future__ import annotations

from llmscope.analysis.irt import Ability, _trust_warnings


def _abilities(pairs: list[tuple[float, float]]) -> list[Ability]:
    return [
        Ability(
            run_id=f"r{i}",
            model=f"m{i}",
            theta=t,
            ci=(t - 0.1, t + 0.1),
            se=0.05,
            n=100,
            accuracy=acc,
            expected_accuracy=None,
        )
        for i, (t, acc) in enumerate(pairs)
    ]


def test_abilities_that_follow_accuracy_get_no_warning() -> None:
    ok = _abilities([(-1.0, 0.5), (-0.5, 0.6), (0.0, 0.7), (0.5, 0.8), (1.0, 0.9)])
    assert _trust_warnings(True, ok) == []


def test_abilities_against_accuracy_and_no_convergence_are_said() -> None:
    # Spearman rho of these five pairs is -1 (theta falls as accuracy rises)
    reversed_ = _abilities([(1.0, 0.5), (0.5, 0.6), (0.0, 0.7), (-0.5, 0.8), (-1.0, 0.9)])
    (w,) = _trust_warnings(True, reversed_)
    assert "rho -1.00" in w and "not correctness" in w
    both = _trust_warnings(False, reversed_)
    assert len(both) == 2 and "did not converge" in both[0]
