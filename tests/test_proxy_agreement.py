"""`benchmarks/proxy_agreement.py`: what the label-free recipe publishes (the trained model only where the pseudo-dev
says it beats the start: beyond noise, as fine-tuning's guard decides, where the steps hold per-query scores), whether
that ever loses on the judgments, and how well the pseudo-dev ranks the arms."""

import pytest

from benchmarks.adaptation import PER_QUERY
from benchmarks.proxy_agreement import (
    BOOTSTRAP_RULE, MEANS_RULE, PUBLISHED, never_loses, proxy_agreement, seed_agreement, with_published,
)


def steps(pseudo_dev: float, test: float, **adaptation) -> dict:
    found = {"pseudo-dev": {"ndcg@10": pseudo_dev}, "zero-shot": {"ndcg@10": test, "recall@100": 0.9}}
    return {**found, "adaptation": adaptation} if adaptation else found


def judged_steps(per_query: list[float], test: float) -> dict:
    """Steps as the benchmark keeps them now: the pseudo-dev's nDCG@10 of each query beside its mean."""
    pseudo_dev = {"ndcg@10": sum(per_query) / len(per_query), PER_QUERY: {f"q{n}": v for n, v in enumerate(per_query)}}
    return {"pseudo-dev": pseudo_dev, "zero-shot": {"ndcg@10": test, "recall@100": 0.9}}


START_PER_QUERY = [0.2, 0.9, 0.5, 0.7, 0.4, 0.6, 0.3, 0.8] * 10  # 80 pseudo-queries, spread as real ones are


def test_a_model_is_published_only_where_its_pseudo_dev_beats_the_starts():
    results = {
        "start": {1: steps(0.60, 0.64)},
        "mlm": {1: steps(0.55, 0.56)},  # worse on the pseudo-dev: the start is published
        "seed": {1: steps(0.60, 0.70)},  # a tie is not a win: the start is published
        "rrf": {1: steps(0.70, 0.66)},  # better on the pseudo-dev: published
    }
    published = with_published(results)

    assert published["mlm"][1][PUBLISHED] == {"ndcg@10": 0.64, "recall@100": 0.9, "kept_start": True, "rule": MEANS_RULE}
    assert published["seed"][1][PUBLISHED]["ndcg@10"] == 0.64
    assert published["rrf"][1][PUBLISHED] == {"ndcg@10": 0.66, "recall@100": 0.9, "kept_start": False, "rule": MEANS_RULE}
    assert "published" not in results["rrf"][1]  # the steps given are left as they were


def test_a_pseudo_label_run_that_kept_its_student_publishes_what_that_student_would():
    results = {
        "start": {1: steps(0.60, 0.64)},
        "seed": {1: steps(0.62, 0.58)},
        # Its round beats everything, but its own run kept its student, SEED's model: that is its output.
        "seed-then-pseudo-labels": {1: steps(0.90, 0.90, kept_start=True)},
        "pseudo-labels-sentences": {1: steps(0.65, 0.66, kept_start=False)},
    }
    published = with_published(results)

    assert published["seed-then-pseudo-labels"][1][PUBLISHED] == {
        "ndcg@10": 0.58, "recall@100": 0.9, "kept_start": False, "rule": MEANS_RULE,
    }
    assert published["pseudo-labels-sentences"][1][PUBLISHED]["ndcg@10"] == 0.66


def test_with_per_query_scores_a_model_is_published_only_where_its_gain_is_beyond_the_pseudo_devs_noise():
    """As fine-tuning's guard: a mean gain that one query of 80 makes (+0.005) keeps the start; the same gain on every
    query, and a large one, publish."""
    noisy = [START_PER_QUERY[0] + 0.4, *START_PER_QUERY[1:]]
    results = {
        "start": {1: judged_steps(START_PER_QUERY, 0.64)},
        "mlm": {1: judged_steps(noisy, 0.70)},
        "seed": {1: judged_steps([value + 0.005 for value in START_PER_QUERY], 0.70)},
        "tsdae": {1: judged_steps([min(1.0, value + 0.1) for value in START_PER_QUERY], 0.72)},
    }
    published = with_published(results)

    assert sum(noisy) / 80 > sum(START_PER_QUERY) / 80  # by the means, mlm would be published
    assert published["mlm"][1][PUBLISHED] == {
        "ndcg@10": 0.64, "recall@100": 0.9, "kept_start": True, "rule": BOOTSTRAP_RULE,
    }
    assert published["seed"][1][PUBLISHED]["kept_start"] is False and published["seed"][1][PUBLISHED]["ndcg@10"] == 0.70
    assert published["tsdae"][1][PUBLISHED]["ndcg@10"] == 0.72
    # The agreement counts the same decisions: mlm kept although it won on the evaluation split is the one wrong.
    found = seed_agreement(results, 1)
    assert (found["decisions_right"], found["decisions"]) == (2, 3) and found["decision_rules"] == [BOOTSTRAP_RULE]
    assert "decided by paired bootstrap" in proxy_agreement(results)["markdown"]


def test_never_loses_holds_only_when_every_seed_stays_within_the_margin():
    results = with_published({
        "start": {1: steps(0.60, 0.64), 2: steps(0.50, 0.64)},
        "seed": {1: steps(0.61, 0.637), 2: steps(0.40, 0.20)},  # seed 2 kept the start
        "mlm": {1: steps(0.61, 0.62), 2: steps(0.51, 0.70)},  # seed 1 published a model 0.02 worse
    })
    found = {item["arm"]: item for item in never_loses(results)}

    assert found["seed"]["differences"] == [pytest.approx(-0.003), 0.0] and found["seed"]["kept"] == 1
    assert found["seed"]["holds"]
    assert found["mlm"]["differences"] == [pytest.approx(-0.02), pytest.approx(0.06)] and not found["mlm"]["holds"]


def test_the_proxy_is_judged_by_rank_agreement_with_the_judgments():
    concordant = {
        "start": {1: steps(0.5, 0.60)}, "a": {1: steps(0.6, 0.70)}, "b": {1: steps(0.4, 0.50)}, "c": {1: steps(0.7, 0.80)},
    }
    found = seed_agreement(concordant, 1)
    assert found["kendall_tau"] == pytest.approx(1.0)
    assert (found["pairs_agreeing"], found["pairs"]) == (6, 6)
    assert (found["decisions_right"], found["decisions"]) == (3, 3)
    assert found["best_by_proxy"] == found["best_by_truth"] == "c"

    # The pseudo-dev says b beats the start where the judgments say it loses: one decision wrong, one pair reversed.
    discordant = {**concordant, "b": {1: steps(0.55, 0.50)}}
    found = seed_agreement(discordant, 1)
    assert (found["pairs_agreeing"], found["decisions_right"]) == (5, 2)
    assert found["kendall_tau"] == pytest.approx(4 / 6)


def test_the_agreement_table_has_a_row_per_seed_and_the_mean_tau():
    results = {
        "start": {1: steps(0.5, 0.6), 2: steps(0.5, 0.6)},
        "mlm": {1: steps(0.6, 0.7), 2: steps(0.6, 0.5)},
        "tsdae": {1: steps(0.4, 0.5), 2: steps(0.4, 0.7)},
    }
    found = proxy_agreement(results)

    assert [item["kendall_tau"] for item in found["per_seed"]] == [pytest.approx(1.0), pytest.approx(-1.0)]
    assert found["mean_kendall_tau"] == pytest.approx(0.0)
    assert "Mean Kendall tau over seeds: +0.000." in found["markdown"]


def test_with_fewer_than_two_trained_models_the_agreement_is_said_to_be_unmeasured_rather_than_an_empty_table():
    found = proxy_agreement({"start": {1: steps(0.5, 0.6)}, "mlm": {1: steps(0.6, 0.7)}})

    assert found["per_seed"] == [] and found["mean_kendall_tau"] is None
    assert "agrees with the evaluation split: not measured" in found["markdown"] and "|" not in found["markdown"]


def test_the_macro_averages_guard_table_leaves_the_kept_count_blank_rather_than_none_kept():
    """The start is kept or not per collection: over collections there is no one yes/no to count, so the macro
    table says nothing there, where it used to count SEED as never keeping the start although it kept it everywhere."""
    from benchmarks.adaptation_arms import BY_KEY
    from benchmarks.adaptation_report import macro_average, section

    collection = with_published({"start": {1: steps(0.60, 0.64)}, "seed": {1: steps(0.50, 0.58)}})  # keeps the start
    macro = macro_average([collection, collection])
    (guard,) = never_loses(macro)

    assert guard["kept"] is None and guard["differences"] == [0.0] and guard["holds"]
    assert f"| {BY_KEY['seed'].name} | +0.0000 | - | yes |" in section("macro", macro, (), agreement=False)["markdown"]
    assert never_loses(collection)[0]["kept"] == 1  # per collection it is counted
