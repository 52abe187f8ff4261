"""judge() thresholds and spread(): the one rule every claim's verdict follows."""

from __future__ import annotations

import pytest

from commands.reproduce.verdict import judge, spread


def test_spread_is_median_min_max_of_finite_values() -> None:
    assert spread([3.0, 1.0, 2.0, 10.0]) == (2.5, 1.0, 10.0)
    assert spread([2.0, float("nan"), 4.0, 3.0]) == (3.0, 2.0, 4.0)
    with pytest.raises(ValueError, match="no finite value"):
        spread([float("nan")])


@pytest.mark.parametrize(("ratio", "claimed", "verdict"), [
    ((2.0, 1.5, 2.5), 1.8, "holds"),            # lo > 1, median reaches the claim
    ((1.8, 1.01, 2.5), 1.8, "holds"),           # exactly the claimed median
    ((1.5, 1.2, 1.7), 1.8, "holds in direction"),  # above 1, smaller than claimed
    ((1.5, 1.2, 1.7), None, "holds"),           # the paper claims only the direction
    ((1.5, 1.0, 1.7), 1.2, "does not hold here"),  # spread reaches 1 exactly
    ((0.8, 0.7, 0.9), None, "does not hold here"),
    ((1.3, 0.9, 1.6), 1.1, "does not hold here"),  # median above claim, spread below 1
])
def test_judge_thresholds(ratio: tuple[float, float, float], claimed: float | None,
                          verdict: str) -> None:
    v, sentence = judge(ratio, claimed, what="X over Y")
    assert v == verdict
    assert sentence.startswith(f"X over Y is {ratio[0]:.2f}x [{ratio[1]:.2f}-{ratio[2]:.2f}]")
    if claimed is not None:
        assert f"against {claimed:.2f}x claimed" in sentence
    else:
        assert "claimed" not in sentence


def test_judge_refuses_non_finite() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        judge((float("inf"), 1.0, 2.0), 1.5, what="X")
