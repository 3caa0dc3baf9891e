"""Pre-train a SEED-Encoder (MLM + a weak [CLS]-only decoder) with the Hugging Face Trainer.

    accelerate launch training/pretrain.py                      # no arguments: seed-tiny on a built-in corpus
    accelerate launch training/pretrain.py --config_name seed-base --train_file corpus.txt --max_steps 100000
    accelerate launch training/pretrain.py training/configs/seed_base_pretraining.yaml
    accelerate launch --num_processes 2 --cpu training/pretrain.py --max_steps 20

Every `TrainingArguments` flag works (`--help` lists them after ours); a single JSON or YAML
file of arguments may be given instead of flags.
"""

import sys

from transformers import HfArgumentParser

from training.arguments import DataArguments, ModelArguments, SeedPretrainingArguments
from training.distributed import relaunch_cpu_processes_if_requested
from training.errors import PretrainingInputError
from training.pretraining import run_pretraining


def parse_arguments(argv: list[str]) -> tuple[ModelArguments, DataArguments, SeedPretrainingArguments]:
    parser = HfArgumentParser(
        (ModelArguments, DataArguments, SeedPretrainingArguments),
        description=__doc__.split("\n\n")[0],
    )
    try:
        if len(argv) == 1 and argv[0].endswith(".json"):
            return parser.parse_json_file(argv[0])
        if len(argv) == 1 and argv[0].endswith((".yaml", ".yml")):
            return parser.parse_yaml_file(argv[0])
        return parser.parse_args_into_dataclasses(args=argv)
    except ValueError as error:  # TrainingArguments' own checks, e.g. --bf16 on a CPU without --use_cpu
        raise PretrainingInputError(f"Invalid training arguments: {error}") from None


def main(argv: list[str] | None = None) -> int:
    relaunch_cpu_processes_if_requested()
    try:
        model_args, data_args, training_args = parse_arguments(sys.argv[1:] if argv is None else argv)
        output_dir = run_pretraining(model_args, data_args, training_args)
    except PretrainingInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"SEED-Encoder written to {output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
