"""The ablation's results as a table: per arm, the mean ± standard deviation over seeds of each column, as markdown
and as JSON."""

from collections.abc import Callable

from ablation import METRICS, PRETRAINING, Arm
from harness import markdown_table, mean_and_std, mean_std

METRIC_NAMES = {"ndcg@10": "nDCG@10", "recall@100": "R@100"}


def columns(evaluations: list[str]) -> dict[str, Callable[[dict], float | None]]:
    """Each column's value in one seed's steps (None while its step has not run): cls_information, every metric of
    every evaluation, the pre-training's wall time and the whole arm's (once all its steps have run)."""

    def metric(evaluation: str, name: str) -> Callable[[dict], float | None]:
        return lambda steps: steps[evaluation][name] if evaluation in steps else None

    def total_seconds(steps: dict) -> float | None:
        if any(evaluation not in steps for evaluation in evaluations):
            return None
        return sum(step["seconds"] for step in steps.values())

    return {
        "cls_information": lambda steps: steps[PRETRAINING]["cls_information"] if PRETRAINING in steps else None,
        **{f"{evaluation} {name}": metric(evaluation, name) for evaluation in evaluations for name in METRICS},
        "pretraining seconds": lambda steps: steps[PRETRAINING]["seconds"] if PRETRAINING in steps else None,
        "arm seconds": total_seconds,
    }


def summarise(arms: list[Arm], results: dict, evaluations: list[str]) -> list[dict]:
    """Per arm: its name, each seed's steps, and per column the mean, standard deviation and number of seeds."""
    rows = []
    for arm in arms:
        per_seed = results.get(arm.key, {})
        summary = {}
        for column, value_of in columns(evaluations).items():
            values = [value for steps in per_seed.values() if (value := value_of(steps)) is not None]
            mean, std = mean_and_std(values) if values else (None, None)
            summary[column] = {"mean": mean, "std": std, "seeds": len(values), "values": values}
        rows.append({"arm": arm.name, "key": arm.key, "summary": summary, "per_seed": per_seed})
    return rows


def header(column: str) -> str:
    if column == "cls_information":
        return "cls_information (nats/token)"
    if column.endswith("seconds"):
        return f"{column.removesuffix(' seconds').replace('pretraining', 'pre-training')} wall time (s)"
    evaluation, metric = column.rsplit(" ", 1)
    return f"{evaluation} {METRIC_NAMES[metric]}"


def cell(column: str, summary: dict) -> str:
    if not summary["values"]:
        return "n/a"
    # cls_information is a few thousandths of a nat per token early in training: four digits keep it readable.
    digits = 0 if column.endswith("seconds") else 4 if column == "cls_information" else 3
    return mean_std(summary["values"], digits=digits)


def markdown(rows: list[dict]) -> str:
    names = list(rows[0]["summary"])
    return markdown_table(
        ["arm", *map(header, names)],
        [[row["arm"], *(cell(name, row["summary"][name]) for name in names)] for row in rows],
    )
