"""The pseudo-dev as a judge: what the adaptation recipe publishes when it keeps the start unless the pseudo-dev says
otherwise, whether that ever loses on the real judgments, and how well the pseudo-dev ranks the arms as they do.

Works on one collection's results, `{arm key: {seed: {step: metrics}}}`, as `domain_adaptation.py` gathers them; every
figure is read from the zero-shot (the evaluation split) and pseudo-dev steps of the trained models.
"""

import itertools
import math
import statistics

from scipy.stats import kendalltau

from benchmarks.adaptation import ADAPTATION, PSEUDO_DEV, ZERO_SHOT
from benchmarks.adaptation_arms import BY_KEY, START
from benchmarks.harness import markdown_table

PUBLISHED = "published"
METRIC = "ndcg@10"
# The bound: a published model may score at most this much below the start on the evaluation split.
NEVER_LOSES_MARGIN = 0.005


def output_steps(results: dict, key: str, seed) -> dict:
    """The steps of the model the arm's own run left as its output: a pseudo-label run that kept its start left its
    student (the start, or the arm it continues) unchanged."""
    steps = results[key][seed]
    arm = BY_KEY[key]
    if arm.distils and steps.get(ADAPTATION, {}).get("kept_start"):
        return results.get(arm.student, {}).get(seed, {})
    return steps


def with_published(results: dict) -> dict:
    """`results` with a `published` step wherever it can be decided: the arm's output where its pseudo-dev nDCG@10
    beats the start's (the same seed's pseudo-dev), else the start; `kept_start` says which."""
    published = {key: {seed: dict(steps) for seed, steps in per_seed.items()} for key, per_seed in results.items()}
    for key, per_seed in results.items():
        for seed in per_seed:
            start = results.get(START.key, {}).get(seed, {})
            output = output_steps(results, key, seed)
            if not all(step in found for found in (start, output) for step in (ZERO_SHOT, PSEUDO_DEV)):
                continue
            beats = output[PSEUDO_DEV][METRIC] > start[PSEUDO_DEV][METRIC]
            chosen = output if beats else start
            published[key][seed][PUBLISHED] = {
                METRIC: chosen[ZERO_SHOT][METRIC], "recall@100": chosen[ZERO_SHOT].get("recall@100"), "kept_start": not beats,
            }
    return published


def never_loses(results: dict) -> list[dict]:
    """Per arm (the start left out): each seed's published nDCG@10 minus the start's, how often the start was kept
    (None where no seed says, as in a macro average: the start is kept or not per collection), and whether no seed
    lost more than NEVER_LOSES_MARGIN."""
    found = []
    for key, per_seed in results.items():
        if key == START.key:
            continue
        differences, kept = [], []
        for seed, steps in per_seed.items():
            start = results.get(START.key, {}).get(seed, {})
            if PUBLISHED in steps and ZERO_SHOT in start:
                differences.append(steps[PUBLISHED][METRIC] - start[ZERO_SHOT][METRIC])
                if "kept_start" in steps[PUBLISHED]:
                    kept.append(steps[PUBLISHED]["kept_start"])
        if differences:
            found.append({
                "arm": key, "differences": differences, "kept": sum(kept) if kept else None,
                "holds": min(differences) >= -NEVER_LOSES_MARGIN,
            })
    return found


def seed_agreement(results: dict, seed) -> dict | None:
    """For one seed: every trained model's (pseudo-dev, evaluation split) nDCG@10, their Kendall tau, how many pairs
    of arms the pseudo-dev orders as the split does, and how many of its decisions against the start were right."""
    scores = {
        key: (per_seed[seed][PSEUDO_DEV][METRIC], per_seed[seed][ZERO_SHOT][METRIC])
        for key, per_seed in results.items()
        if seed in per_seed and PSEUDO_DEV in per_seed[seed] and ZERO_SHOT in per_seed[seed]
    }
    if len(scores) < 3 or START.key not in scores:
        return None
    proxy, truth = zip(*scores.values())
    tau = kendalltau(proxy, truth).statistic  # nan where either side ties every model
    ordered = [
        (proxy_a - proxy_b) * (truth_a - truth_b) > 0
        for (proxy_a, truth_a), (proxy_b, truth_b) in itertools.combinations(scores.values(), 2)
        if proxy_a != proxy_b and truth_a != truth_b
    ]
    start_proxy, start_truth = scores[START.key]
    decisions = [(proxy > start_proxy) == (truth > start_truth) for key, (proxy, truth) in scores.items() if key != START.key]
    best_by_proxy = max(scores, key=lambda key: scores[key][0])
    best_by_truth = max(scores, key=lambda key: scores[key][1])
    return {
        "seed": seed, "models": len(scores), "kendall_tau": None if math.isnan(tau) else float(tau),
        "pairs_agreeing": sum(ordered),
        "pairs": len(ordered), "decisions_right": sum(decisions), "decisions": len(decisions),
        "best_by_proxy": best_by_proxy, "best_by_truth": best_by_truth,
    }


def proxy_agreement(results: dict) -> dict:
    """`seed_agreement` for every seed, their mean tau, and the table."""
    seeds = sorted({seed for per_seed in results.values() for seed in per_seed})
    per_seed = [found for seed in seeds if (found := seed_agreement(results, seed)) is not None]
    if not per_seed:  # said in words: an empty table reads as a failure
        return {"per_seed": [], "mean_kendall_tau": None, "markdown": (
            "How well the pseudo-dev (no label) agrees with the evaluation split: not measured, as no seed has the "
            "start and at least two trained models scored on both (run more arms into the work folder)."
        )}
    rows = [
        [item["seed"], item["models"], "-" if item["kendall_tau"] is None else f"{item['kendall_tau']:+.3f}",
         f"{item['pairs_agreeing']} of {item['pairs']}",
         f"{item['decisions_right']} of {item['decisions']}", BY_KEY[item["best_by_proxy"]].name,
         BY_KEY[item["best_by_truth"]].name]
        for item in per_seed
    ]
    taus = [item["kendall_tau"] for item in per_seed if item["kendall_tau"] is not None]
    mean_tau = statistics.mean(taus) if taus else None
    table = markdown_table(
        ["seed", "models", "Kendall tau", "pairs of arms in the same order", "keep-or-publish decisions right",
         "best on the pseudo-dev", "best on the evaluation split"],
        rows,
    )
    markdown = (
        "How well the pseudo-dev (no label) agrees with the evaluation split, over the trained models of each seed "
        f"(nDCG@10):\n\n{table}" + ("" if mean_tau is None else f"\n\nMean Kendall tau over seeds: {mean_tau:+.3f}.")
    )
    return {"per_seed": per_seed, "mean_kendall_tau": mean_tau, "markdown": markdown}
