"""The start of a fine-tuning run, and whether the run keeps it: --model_name_or_path, or the best of it and
--candidate_starts on the dev split; published in place of every round that does not beat it there.

A two-step recipe (continue a trained retriever on a corpus with `training/pretrain.py`, then fine-tune the result)
has two models to start from: the adapted one and the retriever it was adapted from. A run that compares its rounds
only with the adapted model can publish a model that is worse than the original, when the first step lost more than
the second won back. With the original among the candidate starts, the run trains whichever scores higher on its dev
split, and compares its rounds with that one.
"""

from collections.abc import Callable
from pathlib import Path

from .rounds import RoundPlan, computed_once

CANDIDATE_STARTS_FILE = "candidate_starts_dev_metrics.json"


def candidate_dev_metrics(paths: list[str], load: Callable, evaluate: Callable, kept_in: Path) -> dict[str, dict]:
    """Each path's dev metrics (`evaluate(load(path))`), computed once and kept in `kept_in`, so that a resumed run
    chooses the same start without scoring them again."""
    return computed_once(kept_in, lambda: {path: evaluate(load(path)) for path in paths})


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


def best_round(plans: list[RoundPlan], start_metrics: dict, metric: str) -> RoundPlan | None:
    """The round with the best dev `metric`, or None when none beats the start: a run never publishes a model
    that its own dev split found no better than the one it began from."""
    best = max(plans, key=lambda plan: plan.dev_metrics()[metric])
    return best if best.dev_metrics()[metric] > start_metrics[metric] else None


def kept_start_line(plans: list[RoundPlan], start_metrics: dict, metric: str) -> str:
    """What a run that kept its start says, in one line (the log and the card)."""
    best = max(plans, key=lambda plan: plan.dev_metrics()[metric])
    return (
        f"No round beat the start on the dev split ({metric}: round {best.number} {best.dev_metrics()[metric]:.3f} "
        f"<= start {start_metrics[metric]:.3f}): kept the start, its weights unchanged. The rounds' models stay in "
        f"{best.folder.parent.name}/round-N/model."
    )
