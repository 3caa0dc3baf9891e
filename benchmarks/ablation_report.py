"""The ablation's results as tables: per arm, the mean ± standard deviation over seeds of each column, as markdown
and as JSON; the macro average over collections; and whether each of the paper's claims holds beyond 2 standard
deviations of its per-seed difference."""

from collections.abc import Callable

from benchmarks.ablation import METRICS, MLM_ONLY, PRETRAINING, SEED, START, STRONG_DECODER, ZERO_SHOT, Arm
from benchmarks.harness import markdown_table, mean_and_std, mean_std

METRIC_NAMES = {"ndcg@10": "nDCG@10", "recall@100": "R@100"}
CURVE_POINTS = ("first", "middle", "last")


def columns(evaluations: list[str]) -> dict[str, Callable[[dict], float | None]]:
    """Each column's value in one seed's steps (None while its step has not run, or where the row has none):
    cls_information at the first, middle and last evaluation of pre-training, how far the decoder loss fell from the
    first evaluation to the last, every metric of every evaluation, the pre-training's wall time and the whole row's
    (once all its steps have run)."""

    def pretraining(value_of: Callable[[dict], float | None]) -> Callable[[dict], float | None]:
        return lambda steps: value_of(steps[PRETRAINING]) if PRETRAINING in steps else None

    def curve_point(index: int) -> Callable[[dict], float | None]:
        return pretraining(lambda step: step["cls_information_curve"][index] if step.get("cls_information_curve") else None)

    def decoder_loss_drop(step: dict) -> float | None:
        if step.get("first_decoder_loss") is None or step.get("decoder_loss") is None:
            return None
        return step["first_decoder_loss"] - step["decoder_loss"]

    def metric(evaluation: str, name: str) -> Callable[[dict], float | None]:
        return lambda steps: steps[evaluation][name] if evaluation in steps else None

    def total_seconds(steps: dict) -> float | None:
        if any(evaluation not in steps for evaluation in evaluations):
            return None
        return sum(step["seconds"] for step in steps.values())

    return {
        **{f"cls_information {point}": curve_point(index) for index, point in enumerate(CURVE_POINTS)},
        "decoder_loss drop": pretraining(decoder_loss_drop),
        **{f"{evaluation} {name}": metric(evaluation, name) for evaluation in evaluations for name in METRICS},
        "pretraining seconds": pretraining(lambda step: step["seconds"]),
        "arm seconds": total_seconds,
    }


def summarise(arms: list[Arm], results: dict, evaluations: list[str]) -> list[dict]:
    """Per row (the arms, in `results`' order when it holds the start row too): its name, each seed's steps, and per
    column the mean, standard deviation and number of seeds."""
    names = {arm.key: arm.name for arm in (START, *arms)}
    rows = []
    for key in results:
        per_seed = results[key]
        summary = {}
        for column, value_of in columns(evaluations).items():
            values = [value for steps in per_seed.values() if (value := value_of(steps)) is not None]
            mean, std = mean_and_std(values) if values else (None, None)
            summary[column] = {"mean": mean, "std": std, "seeds": len(values), "values": values}
        rows.append({"arm": names[key], "key": key, "summary": summary, "per_seed": per_seed})
    return rows


def macro_average(per_collection: list[dict]) -> dict:
    """results[arm][seed][step] averaged over collections: every number (and list of numbers) a step has in every
    collection, for the arms, seeds and steps that all collections have run."""

    def average(values: list):
        if all(isinstance(value, (int, float)) for value in values):
            return sum(values) / len(values)
        if all(isinstance(value, list) for value in values):
            return [average(list(points)) for points in zip(*values)]
        return None

    first, *others = per_collection
    macro = {}
    for arm, seeds in first.items():
        macro[arm] = {}
        for seed, steps in seeds.items():
            if not all(seed in results.get(arm, {}) for results in others):
                continue
            macro[arm][seed] = {}
            for step, fields in steps.items():
                if not all(step in results[arm][seed] for results in others):
                    continue
                averaged = {
                    name: average([fields[name], *(results[arm][seed][step].get(name) for results in others)])
                    for name in fields
                }
                macro[arm][seed][step] = {name: value for name, value in averaged.items() if value is not None}
    return macro


def header(column: str) -> str:
    if column.startswith("cls_information"):
        return f"{column} (nats/token)"
    if column == "decoder_loss drop":
        return "decoder loss, first − last evaluation (nats)"
    if column.endswith("seconds"):
        return f"{column.removesuffix(' seconds').replace('pretraining', 'pre-training')} wall time (s)"
    evaluation, metric = column.rsplit(" ", 1)
    return f"{evaluation} {METRIC_NAMES[metric]}"


def cell(column: str, summary: dict) -> str:
    if not summary["values"]:
        return "n/a"
    # cls_information is a few thousandths of a nat per token early in training: four digits keep it readable.
    digits = 0 if column.endswith("seconds") else 4 if column.startswith("cls_information") else 3
    return mean_std(summary["values"], digits=digits)


def markdown(rows: list[dict]) -> str:
    names = list(rows[0]["summary"])
    return markdown_table(
        ["arm", *map(header, names)],
        [[row["arm"], *(cell(name, row["summary"][name]) for name in names)] for row in rows],
    )


def curve_plots(rows: list[dict]) -> list[str]:
    """The PNG of each pre-training run's curves (losses and cls_information), by arm and seed (none in a macro
    average: each collection has its own)."""
    return [
        f"{row['key']} seed {seed}: {steps[PRETRAINING]['plot']}"
        for row in rows for seed, steps in row["per_seed"].items() if "plot" in steps.get(PRETRAINING, {})
    ]


def claims(rows: list[dict], evaluations: list[str]) -> list[dict]:
    """The paper's claims as paired per-seed differences of two rows' columns: SEED's last cls_information above the
    strong decoder's; SEED at least MLM only after few-shot fine-tuning, dense and sparse; continued pre-training (each
    arm) at least the start. Each with the mean ± sd of the differences and whether it holds beyond 2 sd."""
    by_key = {row["key"]: row for row in rows}
    few_shot = [evaluation for evaluation in evaluations if not evaluation.endswith(ZERO_SHOT)]
    wanted = [("SEED's cls_information > the strong decoder's", SEED.key, STRONG_DECODER.key, ["cls_information last"])]
    wanted += [
        (f"SEED ≥ MLM only, {evaluation}", SEED.key, MLM_ONLY.key, [f"{evaluation} ndcg@10"]) for evaluation in few_shot
    ]
    wanted += [
        (f"{by_key[key]['arm']} ≥ the start, {evaluation}", key, START.key, [f"{evaluation} ndcg@10"])
        for key in (MLM_ONLY.key, SEED.key, STRONG_DECODER.key) if key in by_key for evaluation in evaluations
    ]
    found = []
    for claim, better, worse, names in wanted:
        if better not in by_key or worse not in by_key:
            continue
        for column in names:
            value_of = columns(evaluations)[column]
            better_seeds, worse_seeds = by_key[better]["per_seed"], by_key[worse]["per_seed"]
            differences = [
                value_of(better_seeds[seed]) - value_of(worse_seeds[seed])
                for seed in better_seeds
                if seed in worse_seeds and value_of(better_seeds[seed]) is not None and value_of(worse_seeds[seed]) is not None
            ]
            if differences:
                found.append({"claim": claim, "column": column, "differences": differences, "verdict": verdict(differences)})
    return found


def verdict(differences: list[float]) -> str:
    """Whether a paired difference is positive beyond 2 standard deviations of the per-seed differences."""
    mean, std = mean_and_std(differences)
    if std is None:
        return "one seed: no standard deviation to judge by"
    if mean > 2 * std:
        return "holds beyond 2 sd"
    if mean < -2 * std:
        return "reversed beyond 2 sd"
    return "within 2 sd: not shown"


def claims_markdown(found: list[dict]) -> str:
    return markdown_table(
        ["claim", "per-seed difference (mean ± sd)", "verdict"],
        [[item["claim"], mean_std(item["differences"], digits=4), item["verdict"]] for item in found],
    )
