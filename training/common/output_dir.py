"""The output folder of a run: resume what was interrupted and make the final model appear only once it is whole."""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .errors import InputError

# Trainer writes trainer_state.json last, so a checkpoint without it was cut short.
CHECKPOINT_COMPLETE_MARKER = "trainer_state.json"
# The final model is moved into place with config.json last: a folder with config.json is whole.
FINISHED_MARKER = "config.json"
STAGING_DIR = ".final-model-incomplete"


@dataclass
class ExistingRun:
    config: dict
    last_checkpoint: Path | None
    model_dir: Path  # the last whole checkpoint, else the finished model: where its tokenizer is


def _checkpoints(output_dir: Path) -> list[Path]:
    found = [p for p in output_dir.glob(f"{PREFIX_CHECKPOINT_DIR}-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]))


def last_complete_checkpoint(folder: Path) -> Path | None:
    """The last whole `checkpoint-N` in `folder`, after removing those cut short (e.g. by `kill -9`)."""
    checkpoints = _checkpoints(folder)
    for checkpoint in checkpoints:
        if not (checkpoint / CHECKPOINT_COMPLETE_MARKER).is_file():
            shutil.rmtree(checkpoint)
    complete = [c for c in checkpoints if c.exists()]
    return complete[-1] if complete else None


def find_existing_run(output_dir: str) -> ExistingRun | None:
    """What an earlier run left in `output_dir`; None when the folder is absent or empty.

    Checkpoints that were cut short (e.g. by `kill -9`) are removed, so the Trainer resumes from
    the last whole one.
    """
    folder = Path(output_dir)
    if not folder.is_dir() or not any(folder.iterdir()):
        return None
    shutil.rmtree(folder / STAGING_DIR, ignore_errors=True)
    last_checkpoint = last_complete_checkpoint(folder)
    config_file = folder / FINISHED_MARKER
    if last_checkpoint is not None:
        config_file = last_checkpoint / FINISHED_MARKER
    if not config_file.is_file():
        leftovers = sorted(p.name for p in folder.iterdir())
        raise InputError(
            f"--output_dir {folder}: the folder is not empty ({', '.join(leftovers[:5])}"
            f"{', ...' if len(leftovers) > 5 else ''}) and holds no SEED pretraining run to continue. "
            "Choose another --output_dir, or pass --overwrite_output_dir to replace its contents."
        )
    return ExistingRun(
        config=json.loads(config_file.read_text()), last_checkpoint=last_checkpoint, model_dir=config_file.parent
    )


def clear_output_dir(output_dir: str) -> None:
    folder = Path(output_dir)
    if folder.is_dir():
        for entry in folder.iterdir():
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def staging_dir(output_dir: str) -> Path:
    return Path(output_dir) / STAGING_DIR


def publish_final_model(output_dir: str) -> None:
    """Move the staged final model into `output_dir`, config.json last."""
    folder, staged = Path(output_dir), Path(output_dir) / STAGING_DIR
    files = sorted(staged.iterdir(), key=lambda p: p.name == FINISHED_MARKER)
    for path in files:
        target = folder / path.name
        if target.is_dir():
            shutil.rmtree(target)
        path.replace(target)
    staged.rmdir()
