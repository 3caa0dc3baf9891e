"""Pre-train a SEED-Encoder (MLM + a weak [CLS]-only decoder) with the Hugging Face Trainer.

    accelerate launch training/pretrain.py                      # no arguments: seed-tiny on a built-in corpus
    accelerate launch training/pretrain.py --config_name seed-base --train_file corpus.txt --max_steps 100000
    accelerate launch training/pretrain.py --config recipes/pretrain_seed_base.yaml
    accelerate launch --num_processes 2 --cpu training/pretrain.py --max_steps 20

Every `TrainingArguments` flag works (`--help` lists them after ours). `--config RECIPE` reads a recipe file
(recipes/*.yaml) whose values the flags beside it override.
"""

import sys

from transformers import HfArgumentParser

from training.common.cli import exit_status, parse_arguments
from training.common.distributed import relaunch_cpu_processes_if_requested
from training.pretraining.arguments import DataArguments, ModelArguments, SeedPretrainingArguments
from training.pretraining.pipeline import run_pretraining


def main(argv: list[str] | None = None) -> int:
    relaunch_cpu_processes_if_requested()
    parser = HfArgumentParser(
        (ModelArguments, DataArguments, SeedPretrainingArguments), description=__doc__.split("\n\n")[0]
    )

    def pretrain() -> str:
        model_args, data_args, training_args = parse_arguments(parser, sys.argv[1:] if argv is None else argv)
        return f"SEED-Encoder written to {run_pretraining(model_args, data_args, training_args)}"

    return exit_status(pretrain)


if __name__ == "__main__":
    sys.exit(main())
