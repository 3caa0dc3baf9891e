"""The SEED paper's claims on any BEIR-layout collection, in one command: an ablation table of pre-training arms.

Arms: MLM only (λ = 0), SEED (3-layer decoder, attention span 2) and a strong decoder (3 layers, full causal
span); with --sweep, decoder depth {1, 3} x span {2, 8, full}. Each arm is pre-trained with the same tokenizer,
text, steps, batch, learning-rate schedule and seed, from scratch or continuing an existing encoder (then the
starting checkpoint itself is a row too); each is evaluated on --split (nDCG@10, Recall@100) as a [CLS] dense
encoder and as SPLADE on its own MLM head, zero-shot and after few-shot fine-tuning on k training queries (the same
queries and recipe for every arm). Per arm: cls_information on the pre-training validation split (how many nats per
token the decoder takes from [CLS]) at the first, middle and last evaluation, and the wall time. Repeated over
seeds: mean ± standard deviation; then whether each of the paper's claims holds beyond 2 standard deviations. One
table per --data_dir, and their macro average. An interrupted table, rerun with the same command, continues where
it stopped.

    python -m benchmarks.paper_table --data_dir ../shared/data/scifact --from ../shared/models/splade-tiny \
        --budget cpu-warm --output_json table.json
    python -m benchmarks.paper_table --data_dir ../shared/data/scifact --budget cpu-hour
    python -m benchmarks.paper_table --data_dir DIR --data_dir DIR2 --from path/to/all-MiniLM-L6-v2 --budget gpu-hour --sweep
"""

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from benchmarks.ablation import BUDGETS, SCRATCH, Ablation, evaluations, select_arms
from benchmarks.ablation_report import claims, claims_markdown, curve_plots, macro_average, markdown, summarise
from benchmarks.harness import limit_threads
from training.common.cli import exit_status
from training.common.errors import InputError


def few_shot_k(value: str) -> int | None:
    if value == "all":
        return None
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: a number of training queries (at least 1) or 'all'")
    return int(value)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--data_dir", required=True, action="append",
        help="A BEIR-layout folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv; qrels/train.tsv for few-shot). "
        "Repeat it for several collections: one table each (in --work_dir/<folder name>), and their macro average.",
    )
    parser.add_argument("--split", default="test", help="The qrels split the arms are evaluated on.")
    parser.add_argument(
        "--from", dest="start", default=SCRATCH,
        help="scratch: new models (the budget's shape) with a WordPiece tokenizer trained once on the pre-training "
        "text and shared by every arm. Or a local encoder folder to continue pre-training: a BERT checkpoint (e.g. "
        "the all-MiniLM-L6-v2 folder) warm-starts the encoder with a fresh decoder; a SEED folder keeps its decoder.",
    )
    parser.add_argument(
        "--pretrain_files", nargs="+",
        help="Pre-training text: plain text, JSON lines or parquet, as training/pretrain.py --train_file takes. "
        "Default: the collection's own corpus.jsonl (corpus-aware pre-training).",
    )
    parser.add_argument(
        "--budget", choices=list(BUDGETS), default="cpu-hour",
        help="Steps, batch, lengths, model shape, seeds and k for every arm. "
        + "; ".join(f"{name}: {budget.description}" for name, budget in BUDGETS.items()) + ".",
    )
    parser.add_argument("--sweep", action="store_true", help="Arms: MLM only and decoder depth {1, 3} x span {2, 8, full}.")
    parser.add_argument("--seeds", nargs="+", type=int, help="Seeds to repeat every arm with (default: the budget's).")
    parser.add_argument(
        "--rows", nargs="+", metavar="KEY",
        help="Run only these rows, by their work-folder keys (start, mlm-only, decoder-3-span-2, decoder-3-span-full; "
        "with --sweep also decoder-D-span-S), e.g. to bring the rows a claim compares to every seed first. The table "
        "this run prints holds only them; the same command without --rows resumes the whole table. Default: all rows.",
    )
    parser.add_argument(
        "--few_shot", nargs="*", type=few_shot_k, metavar="K",
        help="Training queries of each few-shot fine-tuning, numbers or 'all' (default: the budget's); none given: "
        "zero-shot only.",
    )
    parser.add_argument(
        "--work_dir", default="paper-table",
        help="Models, step results (results.json), settings and the embedding cache; rerun with it to resume.",
    )
    parser.add_argument("--output_json", help="Write the table, every seed's results and the settings here as JSON.")
    return parser.parse_args(argv)


def collection_names(data_dirs: list[str]) -> list[str]:
    names = [Path(data_dir).resolve().name for data_dir in data_dirs]
    if len(set(names)) < len(names):
        raise InputError(
            f"--data_dir {' '.join(data_dirs)}: two collections share a folder name, which names each one's table and "
            "work folder. Give each collection a folder of its own name."
        )
    return names


def chosen_rows(keys: list[str] | None, rows: list) -> set[str] | None:
    """The row keys --rows asks for (None: every row), refused with the valid ones when one is not a row of this table."""
    if keys is None:
        return None
    valid = [row.key for row in rows]
    unknown = [key for key in keys if key not in valid]
    if unknown:
        raise InputError(f"--rows {' '.join(unknown)}: not a row of this table. Its rows: {', '.join(valid)}.")
    return set(keys)


def report_section(title: str, rows: list[dict], columns: list[str]) -> dict:
    found = claims(rows, columns)
    plots = curve_plots(rows)
    text = "\n\n".join([
        f"## {title}", markdown(rows),
        *(["Pre-training curves, losses and cls_information (PNG):\n" + "\n".join(f"- {line}" for line in plots)] if plots else []),
        "The paper's claims, as per-seed differences of nDCG@10 (cls_information: nats/token):", claims_markdown(found),
    ])
    return {"arms": rows, "claims": found, "markdown": text}


def run_table(args: argparse.Namespace) -> str:
    budget = BUDGETS[args.budget]
    seeds = tuple(args.seeds or budget.seeds)
    few_shot = tuple(budget.few_shot if args.few_shot is None else args.few_shot)
    names = collection_names(args.data_dir)
    ablations = {
        name: Ablation(Path(args.work_dir) / name, data_dir, args.split, args.start, args.pretrain_files, budget)
        for name, data_dir in zip(names, args.data_dir)
    }
    arms = select_arms(args.sweep)
    rows = chosen_rows(args.rows, next(iter(ablations.values())).rows(arms))  # every collection has the same rows
    columns = evaluations(few_shot)
    results = {}

    def report() -> str:
        sections = {name: report_section(name, summarise(arms, per_collection, columns), columns)
                    for name, per_collection in results.items()}
        if len(names) > 1 and len(results) == len(names):
            macro = macro_average(list(results.values()))
            sections["macro average"] = report_section(f"macro average over {', '.join(names)}", summarise(arms, macro, columns), columns)
        text = "\n\n".join(section["markdown"] for section in sections.values())
        if args.output_json:
            Path(args.output_json).write_text(json.dumps({
                "budget": args.budget, "budget_settings": asdict(budget), "seeds": list(seeds),
                "evaluations": columns, "settings": {name: ablation.settings for name, ablation in ablations.items()},
                "tables": sections, "markdown": text,
            }, indent=2))
        return text

    def after_each(name: str) -> Callable[[dict], None]:
        def record(so_far: dict) -> None:
            results[name] = so_far
            report()
        return record

    for name, ablation in ablations.items():
        results[name] = ablation.run(arms, seeds, few_shot, after_each=after_each(name), only=rows)
    seeds_note = f"mean ± standard deviation over seeds {', '.join(map(str, seeds))}"
    return f"\n{report()}\n\n{seeds_note}; budget {args.budget}: {budget.description}."


def main(argv: list[str] | None = None) -> int:
    limit_threads()
    args = parse_args(argv)
    return exit_status(lambda: run_table(args))


if __name__ == "__main__":
    sys.exit(main())
