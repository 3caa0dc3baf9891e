"""Fine-tune a SEED-Encoder (or any BERT-family or SentenceTransformer checkpoint) into a Siamese retriever.

    accelerate launch training/finetune.py      # no arguments: ./seed-encoder -> ./seed-encoder-st, unsupervised pairs
    accelerate launch training/finetune.py --model_name_or_path seed-encoder --data_dir ../shared/data/scifact \\
        --negatives self --mining_rounds 2 --eval_split test
    accelerate launch --num_processes 2 --cpu training/finetune.py --data_dir ../shared/data/scifact --max_steps 20

Every sentence-transformers / Trainer flag works (`--help` lists them after ours). `--config RECIPE` reads a recipe
file (recipes/*.yaml) whose values the flags beside it override.
"""

import sys

from transformers import HfArgumentParser

from training.common.cli import exit_status, parse_arguments
from training.common.distributed import relaunch_cpu_processes_if_requested
from training.finetuning.arguments import (
    FinetuningDataArguments,
    FinetuningModelArguments,
    RecipeArguments,
    SeedFinetuningArguments,
)
from training.finetuning.pipeline import run_finetuning
from training.finetuning.run_folder import FinetuningRun


def main(argv: list[str] | None = None) -> int:
    relaunch_cpu_processes_if_requested()
    parser = HfArgumentParser(
        (FinetuningModelArguments, FinetuningDataArguments, RecipeArguments, SeedFinetuningArguments),
        description=__doc__.split("\n\n")[0],
    )

    def finetune() -> str:
        arguments = parse_arguments(parser, sys.argv[1:] if argv is None else argv)
        output_dir = run_finetuning(*arguments)
        training_args = arguments[-1]
        if training_args.process_index != 0:  # the run's folder is the main process's (other nodes may not see it)
            return f"Fine-tuned model written to {output_dir}"
        # The run's result, where a newcomer reads first: what it published, against the start, on its own dev split.
        return f"Fine-tuned model written to {output_dir}. {FinetuningRun(output_dir).decision}"

    return exit_status(finetune)


if __name__ == "__main__":
    sys.exit(main())
