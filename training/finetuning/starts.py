"""The start of a fine-tuning run, and whether the run keeps it: --model_name_or_path, or the best of it and
--candidate_starts on the dev split; published in place of every round that does not beat it there beyond the dev
split's own noise (a paired bootstrap over the dev queries).

A two-step recipe (continue a trained retriever on a corpus with `training/pretrain.py`, then fine-tune the result)
has two models to start from: the adapted one and the retriever it was adapted from. A run that compares its rounds
only with the adapted model can publish a model that is worse than the original, when the first step lost more than
the second won back. With the original among the candidate starts, the run trains whichever scores higher on its dev
split, and compares its rounds with that one.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .rounds import RoundPlan, evaluated_once

CANDIDATE_STARTS_FILE = "candidate_starts_dev_metrics.json"
# A round is published only where the lower end of this paired bootstrap interval of its dev gain is above zero. The
# mean alone took noise for a gain: on an unseen corpus a pseudo-dev of about 100 queries rose by 0.003 and the
# published round lost 0.018 on the corpus' real queries (#53).
DEV_CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, BOOTSTRAP_CHUNK = 2000, 0, 100


def candidate_dev_metrics(
    scores: dict[str, tuple[dict, dict]] | None, kept_in: Path
) -> tuple[dict[str, dict], dict[str, dict]]:
    """Each candidate's dev metrics and per-query values, kept in `kept_in` and its per-query twin the first time
    (`scores`: path -> (metrics, per-query values)), so that a resumed run chooses the same start without scoring
    them again (`scores` None: read back)."""

    def split() -> tuple[dict[str, dict], dict[str, dict]]:
        return {path: metrics for path, (metrics, _) in scores.items()}, {path: values for path, (_, values) in scores.items()}

    return evaluated_once(kept_in, split)


def best_start(paths: list[str], metrics: dict[str, dict], metric: str) -> str:
    """The path with the highest dev `metric`; the first (--model_name_or_path) unless another beats it strictly."""
    best = paths[0]
    for path in paths[1:]:
        if metrics[path][metric] > metrics[best][metric]:
            best = path
    return best


def start_choice_line(paths: list[str], metrics: dict[str, dict], metric: str, chosen: str) -> str:
    """What the log and the card say about the choice, in one line."""
    scores = ", ".join(f"{path} {metrics[path][metric]:.3f}" for path in paths)
    return f"Started from {chosen}, the best of the candidate starts on the dev split ({metric}: {scores})."


@dataclass(frozen=True)
class DevComparison:
    """The best round against the start on the dev split: their mean `metric` and a paired bootstrap interval of the
    round's gain over the start (the dev queries resampled with replacement, both models scored on the same draw)."""

    metric: str
    best: RoundPlan
    round_score: float
    start_score: float
    low: float
    high: float
    queries: int

    @property
    def gain(self) -> float:
        return self.round_score - self.start_score

    @property
    def beyond_noise(self) -> bool:
        """Whether the gain is beyond the dev split's own noise: the whole interval above zero."""
        return self.low > 0

    @property
    def published(self) -> RoundPlan | None:
        """The round to publish: the best one where its gain is beyond the noise, else None (the start)."""
        return self.best if self.beyond_noise else None

    def describe(self) -> str:
        return (
            f"{self.metric}, {DEV_CONFIDENCE:.0%} paired bootstrap over {self.queries} queries: round "
            f"{self.best.number} {self.round_score:.3f} vs start {self.start_score:.3f}: {self.gain:+.3f} "
            f"[{self.low:+.3f}, {self.high:+.3f}]"
        )


def gain_interval(
    round_per_query: dict[str, float], start_per_query: dict[str, float], confidence: float = DEV_CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> tuple[float, float]:
    """The `confidence` percentile interval of the mean gain (round minus start) over `resamples` paired bootstrap
    draws of the queries. Seeded: the same scores always give the same interval, so a resumed run decides alike."""
    if round_per_query.keys() != start_per_query.keys():
        raise ValueError("the round and the start were scored on different dev queries; they cannot be paired")
    gains = np.asarray([round_per_query[query] - start_per_query[query] for query in start_per_query])
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = np.concatenate([
        gains[rng.integers(0, len(gains), (min(BOOTSTRAP_CHUNK, resamples - done), len(gains)))].mean(axis=1)
        for done in range(0, resamples, BOOTSTRAP_CHUNK)
    ])
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def compare_with_start(plans: list[RoundPlan], start_per_query: dict[str, float], metric: str) -> DevComparison:
    """The round with the best mean dev `metric`, against the start."""
    best = max(plans, key=lambda plan: plan.dev_metrics()[metric])
    round_per_query = best.dev_per_query()
    low, high = gain_interval(round_per_query, start_per_query)
    return DevComparison(
        metric, best, float(np.mean(list(round_per_query.values()))),
        float(np.mean(list(start_per_query.values()))), low, high, len(start_per_query),
    )


def best_round(plans: list[RoundPlan], start_per_query: dict[str, float], metric: str) -> RoundPlan | None:
    """The round with the best dev `metric` where its gain over the start is beyond the dev split's noise
    (`DevComparison.beyond_noise`), else None: a run never publishes a model that its own dev split cannot tell
    from the one it began from, nor one it found worse."""
    return compare_with_start(plans, start_per_query, metric).published


def decision_line(comparison: DevComparison, folder: Path) -> str:
    """What the run says of its choice, in one line (the log and the card)."""
    if comparison.beyond_noise:
        return f"Round {comparison.best.number} beat the start on the dev split beyond its noise ({comparison.describe()}): published it."
    return (
        f"No round beat the start on the dev split beyond its noise ({comparison.describe()}): kept the start, its "
        f"weights unchanged. The rounds' models stay in {folder.name}/round-N/model."
    )
