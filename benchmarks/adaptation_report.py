"""The label-free adaptation benchmark's tables (`domain_adaptation.py`): per collection and as their macro average,
each arm's mean ± sd over seeds, the claims as paired per-seed differences (holding only beyond 2 sd), what the recipe
publishes against the start, and how well the pseudo-dev agrees with the evaluation split."""

from benchmarks.ablation_report import verdict
from benchmarks.adaptation import ADAPTATION, PSEUDO_DEV, ZERO_SHOT, few_shot_label
from benchmarks.adaptation_arms import (
    ANCHOR_WEIGHTS, ANCHORED_THEN_PSEUDO_LABELS, BY_KEY, DECODER_ANCHORED, DECODER_ANCHORED_FAST, FAST_DECODER_RATE,
    FOUR_NEGATIVES_ARM, LEADS_FOUR_NEGATIVES_ARM, OWN_NEGATIVES_ARM, SPARSE_TEACHER_ARM, TITLES_FOUR_NEGATIVES_ARM,
    TITLES_JUDGED_ON_SENTENCES, anchored_key,
)
from benchmarks.harness import markdown_table, mean_and_std, mean_std
from benchmarks.proxy_agreement import NEVER_LOSES_MARGIN, PUBLISHED, never_loses, proxy_agreement
from training.finetuning.starts import DEV_CONFIDENCE

SHORT_NAMES = {
    "rrf": "RRF of BM25 and the start", "mlm": "MLM only", "tsdae": "TSDAE", "strong-decoder": "strong decoder",
    "decoder-only": "weak decoder alone", "pseudo-labels-sentences": "pseudo-labels (sentences)",
    "pseudo-labels-titles": "pseudo-labels (titles)", "pseudo-labels-crops": "pseudo-labels (crops)",
    TITLES_JUDGED_ON_SENTENCES: "pseudo-labels (titles, judged on sentences)",
    SPARSE_TEACHER_ARM: "pseudo-labels (sentences, SPLADE in the teacher)",
    OWN_NEGATIVES_ARM: "pseudo-labels (sentences, the start's own negatives)",
    FOUR_NEGATIVES_ARM: "pseudo-labels (sentences, four negatives)",
    TITLES_FOUR_NEGATIVES_ARM: "pseudo-labels (titles, four negatives, judged on sentences)",
    LEADS_FOUR_NEGATIVES_ARM: "pseudo-labels (first sentences, four negatives, judged on sentences)",
    "seed-then-pseudo-labels": "SEED then pseudo-labels",
    "seed-or-start-then-pseudo-labels": "SEED or the start, then pseudo-labels",
    "seed-warm-heads": "SEED after warm heads",
    **{anchored_key(weight): f"SEED anchored ({weight})" for weight in ANCHOR_WEIGHTS},
    ANCHORED_THEN_PSEUDO_LABELS: f"SEED anchored ({ANCHOR_WEIGHTS[0]}) then pseudo-labels",
    DECODER_ANCHORED: f"weak decoder alone anchored ({ANCHOR_WEIGHTS[0]})",
    DECODER_ANCHORED_FAST: f"weak decoder alone anchored ({ANCHOR_WEIGHTS[0]}), decoder at {FAST_DECODER_RATE}",
}


def columns(few_shot: tuple[int, ...]) -> dict:
    """Each column's value in one seed's steps of an arm (None while its step has not run, or where it has none)."""

    def metric(evaluation: str, name: str):
        return lambda steps: steps[evaluation].get(name) if evaluation in steps else None

    def adaptation(name: str):
        return lambda steps: steps[ADAPTATION].get(name) if ADAPTATION in steps else None

    evaluations = [ZERO_SHOT, *map(few_shot_label, few_shot)]
    return {
        **{f"{evaluation} {name}": metric(evaluation, name) for evaluation in evaluations for name in ("ndcg@10", "recall@100")},
        f"{PSEUDO_DEV} ndcg@10": metric(PSEUDO_DEV, "ndcg@10"),
        f"{PUBLISHED} ndcg@10": metric(PUBLISHED, "ndcg@10"),
        "start kept": metric(PUBLISHED, "kept_start"),
        "mean pairwise cosine": metric(ZERO_SHOT, "mean_pairwise_cosine"),
        "cls_information": adaptation("cls_information"),
        "teacher prefers the source": adaptation("teacher_prefers_source"),
        "adaptation seconds": adaptation("seconds"),
    }


def summarise(results: dict, few_shot: tuple[int, ...]) -> list[dict]:
    """Per arm: its name, each seed's steps, and per column the mean, sd and number of seeds."""
    rows = []
    for key, per_seed in results.items():
        summary = {}
        for column, value_of in columns(few_shot).items():
            values = [value for steps in per_seed.values() if (value := value_of(steps)) is not None]
            mean, std = mean_and_std([float(value) for value in values]) if values else (None, None)
            summary[column] = {"mean": mean, "std": std, "seeds": len(values), "values": values}
        rows.append({"arm": BY_KEY[key].name, "key": key, "summary": summary, "per_seed": per_seed})
    return rows


def wanted_claims(few_shot: tuple[int, ...]) -> list[tuple[str, str, str, str]]:
    """(claim, better arm, worse arm, column) as the issue asks them: SEED's zero-shot lift and its wins over TSDAE and
    MLM, the weak against the strong decoder, each arm against no adaptation, and the adapted start after few-shot."""
    zero = f"{ZERO_SHOT} ndcg@10"
    wanted = [
        ("SEED > no adaptation (goal: by ≥ 0.02)", "seed", "start", zero),
        ("SEED > TSDAE", "seed", "tsdae", zero),
        ("SEED > MLM only", "seed", "mlm", zero),
        ("weak decoder > strong decoder", "seed", "strong-decoder", zero),
        ("weak decoder alone > TSDAE", "decoder-only", "tsdae", zero),
        ("SEED after warm heads > SEED", "seed-warm-heads", "seed", zero),
        *((f"SEED anchored ({weight}) > SEED", anchored_key(weight), "seed", zero) for weight in ANCHOR_WEIGHTS),
        (f"{SHORT_NAMES[DECODER_ANCHORED]} > weak decoder alone", DECODER_ANCHORED, "decoder-only", zero),
        (f"{SHORT_NAMES[DECODER_ANCHORED]} > {SHORT_NAMES[anchored_key(ANCHOR_WEIGHTS[0])]}", DECODER_ANCHORED,
         anchored_key(ANCHOR_WEIGHTS[0]), zero),
        (f"{SHORT_NAMES[DECODER_ANCHORED_FAST]} > {SHORT_NAMES[DECODER_ANCHORED]}", DECODER_ANCHORED_FAST,
         DECODER_ANCHORED, zero),
    ]
    wanted += [
        (f"{SHORT_NAMES[key]} > no adaptation", key, "start", zero)
        for key in ("rrf", "mlm", "tsdae", "seed-warm-heads", *map(anchored_key, ANCHOR_WEIGHTS),
                    "strong-decoder", "decoder-only", DECODER_ANCHORED, DECODER_ANCHORED_FAST, "pseudo-labels-sentences",
                    "pseudo-labels-titles", TITLES_JUDGED_ON_SENTENCES, SPARSE_TEACHER_ARM, OWN_NEGATIVES_ARM,
                    FOUR_NEGATIVES_ARM, TITLES_FOUR_NEGATIVES_ARM, LEADS_FOUR_NEGATIVES_ARM, "pseudo-labels-crops",
                    "seed-then-pseudo-labels",
                    "seed-or-start-then-pseudo-labels", ANCHORED_THEN_PSEUDO_LABELS)
    ]
    wanted += [
        (f"{SHORT_NAMES[key]} > pseudo-labels (sentences) alone", key, "pseudo-labels-sentences", zero)
        for key in (
            SPARSE_TEACHER_ARM, OWN_NEGATIVES_ARM, FOUR_NEGATIVES_ARM, "seed-then-pseudo-labels",
            "seed-or-start-then-pseudo-labels", ANCHORED_THEN_PSEUDO_LABELS,
        )
    ]
    wanted.append((
        f"{SHORT_NAMES[TITLES_FOUR_NEGATIVES_ARM]} > {SHORT_NAMES[TITLES_JUDGED_ON_SENTENCES]}",
        TITLES_FOUR_NEGATIVES_ARM, TITLES_JUDGED_ON_SENTENCES, zero,
    ))
    wanted.append((
        f"{SHORT_NAMES[LEADS_FOUR_NEGATIVES_ARM]} > {SHORT_NAMES[FOUR_NEGATIVES_ARM]}",
        LEADS_FOUR_NEGATIVES_ARM, FOUR_NEGATIVES_ARM, zero,
    ))
    wanted.append((
        f"{SHORT_NAMES[ANCHORED_THEN_PSEUDO_LABELS]} > SEED then pseudo-labels", ANCHORED_THEN_PSEUDO_LABELS,
        "seed-then-pseudo-labels", zero,
    ))
    for k in few_shot:
        wanted.append((f"SEED then k={k} > the start then k={k}", "seed", "start", f"{few_shot_label(k)} ndcg@10"))
    return wanted


def claims(results: dict, few_shot: tuple[int, ...]) -> list[dict]:
    found = []
    value_of = columns(few_shot)
    for claim, better, worse, column in wanted_claims(few_shot):
        if better not in results or worse not in results:
            continue
        differences = [
            value_of[column](steps) - value_of[column](results[worse][seed])
            for seed, steps in results[better].items()
            if seed in results[worse] and value_of[column](steps) is not None
            and value_of[column](results[worse][seed]) is not None
        ]
        if differences:
            found.append({"claim": claim, "column": column, "differences": differences, "verdict": verdict(differences)})
    return found


def is_number(value) -> bool:
    """A figure to average (a yes/no such as kept_start is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def macro_average(per_collection: list[dict]) -> dict:
    """Per arm and seed, every step's numbers averaged over the collections that all hold that step."""
    first = per_collection[0]
    macro = {}
    for key, per_seed in first.items():
        macro[key] = {}
        for seed, steps in per_seed.items():
            macro[key][seed] = {}
            for step, values in steps.items():
                found = [results[key][seed][step] for results in per_collection if step in results.get(key, {}).get(seed, {})]
                if len(found) == len(per_collection):
                    macro[key][seed][step] = {
                        name: sum(value[name] for value in found) / len(found)
                        for name, number in values.items() if is_number(number)
                        and all(is_number(value.get(name)) for value in found)
                    }
    return macro


def cell(summary: dict, digits: int = 3) -> str:
    values = summary["values"]
    if not values:
        return "-"
    if all(isinstance(value, bool) for value in values):
        return f"{sum(values)} of {len(values)}"
    return mean_std(values, digits=digits)


def section(title: str, results: dict, few_shot: tuple[int, ...], agreement: bool = True) -> dict:
    """One collection's tables (or the macro average's, without the proxy's agreement, which is per collection)."""
    rows = summarise(results, few_shot)
    names = list(columns(few_shot))
    table = markdown_table(
        ["arm", *names],
        [[row["arm"], *(cell(row["summary"][name], 1 if name.endswith("seconds") else 3) for name in names)] for row in rows],
    )
    found = claims(results, few_shot)
    claim_table = markdown_table(
        ["claim", "column", "per-seed difference (mean ± sd)", "verdict"],
        [[item["claim"], item["column"], mean_std(item["differences"], digits=4), item["verdict"]] for item in found],
    )
    guard = never_loses(results)
    guard_table = markdown_table(
        ["arm", "published − start, per seed", "start kept", f"never loses (≥ −{NEVER_LOSES_MARGIN})"],
        [[BY_KEY[item["arm"]].name, ", ".join(f"{value:+.4f}" for value in item["differences"]),
          "-" if item["kept"] is None else f"{item['kept']} of {len(item['differences'])}",
          "yes" if item["holds"] else "no"] for item in guard],
    )
    markdown = (
        f"## {title}\n\n{table}\n\nClaims, as per-seed differences:\n\n{claim_table}\n\nWhat the recipe publishes "
        f"(the trained model where its pseudo-dev nDCG@10 beats the start's beyond noise, the whole "
        f"{DEV_CONFIDENCE:.0%} paired bootstrap interval of the gain above zero as fine-tuning's guard decides, else "
        f"the start; by the means for steps evaluated before per-query scores were kept), against the start:\n\n"
        f"{guard_table}"
    )
    found_agreement = None
    if agreement:
        found_agreement = proxy_agreement(results)
        markdown += "\n\n" + found_agreement["markdown"]
    return {"arms": rows, "claims": found, "never_loses": guard, "proxy_agreement": found_agreement, "markdown": markdown}
