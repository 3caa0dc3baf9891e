"""What the fine-tuning specifications share: the script, a tiny run's flags, and reading a run's rounds."""

import json
from pathlib import Path

from training.finetune import main

REPO_ROOT = Path(__file__).resolve().parents[1]
FINETUNE_SCRIPT = REPO_ROOT / "training" / "finetune.py"

# A few steps of a 2-layer model on short texts, evaluated on the dev split at the end of each round.
TINY_FINETUNE = [
    "--max_seq_length", "64",
    "--per_device_train_batch_size", "8",
    "--per_device_eval_batch_size", "32",
    "--learning_rate", "1e-3",
    "--logging_steps", "1",
    "--dataloader_pin_memory", "false",
    "--seed", "3",
]


def finetune(argv: list) -> int:
    """`python training/finetune.py ARGV`, in this process: 0 on success, 2 on bad input."""
    return main([str(arg) for arg in argv])


def round_examples(output_dir: Path, round_number: int) -> list[tuple[str, str, list[str]]]:
    """(query id, positive id, negative ids) of every training example of a round."""
    saved = json.loads((output_dir / f"round-{round_number}" / "examples.json").read_text())
    return [tuple(example) for example in saved["examples"]]
