"""A round is published only where its dev gain over the start is beyond the dev split's own noise.

The guard resamples the dev queries with replacement (a paired bootstrap: the round and the start scored on the same
draw) and publishes the best round only where the lower end of the 95% interval of its mean gain is above zero. A
mean that rose by less than the queries' spread tells nothing: on an unseen corpus a pseudo-dev of about 100 queries
rose by 0.003 and the published round lost 0.018 on the corpus' real queries.
"""

import json

import numpy as np
import pytest

from training.finetuning.rounds import DEV_METRICS_FILE, RoundPlan, per_query_file
from training.finetuning.starts import best_round, compare_with_start, decision_line, gain_interval

QUERIES = 100


def start_scores() -> dict[str, float]:
    rng = np.random.default_rng(7)
    return {f"q{index}": float(value) for index, value in enumerate(rng.uniform(0.2, 0.8, QUERIES))}


def scored_rounds(tmp_path, *per_query_rounds: dict[str, float]) -> list[RoundPlan]:
    """Finished rounds as a run leaves them: their mean dev nDCG@10 and the value of each dev query."""
    plans = []
    for number, per_query in enumerate(per_query_rounds, start=1):
        plan = RoundPlan(number, tmp_path / f"round-{number}")
        plan.folder.mkdir()
        (plan.folder / DEV_METRICS_FILE).write_text(json.dumps({"dev_ndcg@10": float(np.mean(list(per_query.values())))}))
        per_query_file(plan.folder / DEV_METRICS_FILE).write_text(json.dumps(per_query))
        plans.append(plan)
    return plans


def shifted(scores: dict[str, float], gains) -> dict[str, float]:
    return {query_id: value + gain for (query_id, value), gain in zip(scores.items(), gains)}


def test_a_mean_gain_smaller_than_the_queries_spread_keeps_the_start(tmp_path):
    start = start_scores()
    # Half the queries gain 0.2, half lose 0.19: the mean rises by 0.005, as a noisy pseudo-dev's does.
    noisy = shifted(start, [0.2 if index % 2 else -0.19 for index in range(QUERIES)])
    plans = scored_rounds(tmp_path, noisy)
    comparison = compare_with_start(plans, start, "dev_ndcg@10")

    assert comparison.gain == pytest.approx(0.005)  # the premise: the mean alone would publish the round
    assert comparison.low < 0 < comparison.high
    assert best_round(plans, start, "dev_ndcg@10") is None


def test_a_round_better_on_most_queries_is_published(tmp_path):
    start = start_scores()
    better = shifted(start, [0.1 if index % 5 else 0.0 for index in range(QUERIES)])
    plans = scored_rounds(tmp_path, better)

    assert compare_with_start(plans, start, "dev_ndcg@10").low > 0
    assert best_round(plans, start, "dev_ndcg@10") is plans[0]


def test_of_several_rounds_the_best_mean_is_compared_and_published(tmp_path):
    start = start_scores()
    plans = scored_rounds(
        tmp_path,
        shifted(start, [0.05 if index % 5 else 0.0 for index in range(QUERIES)]),
        shifted(start, [0.1 if index % 5 else 0.0 for index in range(QUERIES)]),
    )

    assert best_round(plans, start, "dev_ndcg@10") is plans[1]


@pytest.mark.parametrize(("gain", "published"), [(0.02, True), (0.0, False), (-0.02, False)])
def test_the_same_gain_on_every_query_has_no_noise_and_a_tie_is_not_a_gain(tmp_path, gain, published):
    start = start_scores()
    plans = scored_rounds(tmp_path, shifted(start, [gain] * QUERIES))

    assert gain_interval(plans[0].dev_per_query(), start) == pytest.approx((gain, gain), abs=1e-12)
    assert (best_round(plans, start, "dev_ndcg@10") is plans[0]) == published


def test_the_interval_is_as_wide_as_the_mean_gains_standard_error_says():
    start = start_scores()
    gains = np.random.default_rng(3).normal(0.01, 0.1, QUERIES)
    low, high = gain_interval(shifted(start, gains), start)
    half_width = 1.96 * gains.std() / np.sqrt(QUERIES)

    assert (high - low) / 2 == pytest.approx(half_width, rel=0.15)
    assert low < gains.mean() < high


def test_the_line_gives_both_scores_the_difference_and_its_interval(tmp_path):
    start = start_scores()
    noisy = shifted(start, [0.2 if index % 2 else -0.19 for index in range(QUERIES)])
    comparison = compare_with_start(scored_rounds(tmp_path, noisy), start, "dev_ndcg@10")
    line = decision_line(comparison, tmp_path / "finetuning")

    assert line.startswith(
        f"No round beat the start on the dev split beyond its noise (dev_ndcg@10, 95% paired bootstrap over {QUERIES} "
        f"queries: round 1 {comparison.round_score:.3f} vs start {comparison.start_score:.3f}: +0.005 "
        f"[{comparison.low:+.3f}, {comparison.high:+.3f}]): kept the start"
    )


def test_a_round_scored_on_other_queries_than_the_start_is_not_compared(tmp_path):
    start = start_scores()
    other = {f"other-{query_id}": value for query_id, value in start.items()}

    with pytest.raises(ValueError, match="different dev queries"):
        gain_interval(other, start)
