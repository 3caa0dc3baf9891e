"""The output folder of a run: one run at a time, resume what was interrupted, and make the final model
appear only once it is whole."""

import json
import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from accelerate.utils import broadcast_object_list
from filelock import FileLock, Timeout
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .errors import InputError

# Trainer writes trainer_state.json last, so a checkpoint without it was cut short.
CHECKPOINT_COMPLETE_MARKER = "trainer_state.json"
# The final model is moved into place with config.json last: a folder with config.json is whole.
FINISHED_MARKER = "config.json"
STAGING_DIR = ".final-model-incomplete"
# Held by the run writing to the folder; it holds that run's process id and host. Not part of the folder's content.
LOCK_FILE = ".run.lock"


@dataclass
class ExistingRun:
    config: dict
    last_checkpoint: Path | None
    model_dir: Path  # the last whole checkpoint, else the finished model: where its tokenizer is


@contextmanager
def output_dir_lock(output_dir: str, is_main_process: bool) -> Iterator[None]:
    """One run at a time in `output_dir`: an exclusive OS lock on a file in it, held for the block.

    Every process of a run enters the block: the main process takes the lock for all of them, and
    all of them learn whether it got it, so a second run stops on every rank with an `InputError`
    naming the folder and the holder, before it writes anything. The operating system drops the
    lock when its holder dies, even by `kill -9`, so a rerun that resumes the run is never blocked.
    On leaving, the lock file is removed, and so are the folders this call created if the run left
    nothing in them (bad input).
    """
    folder = Path(output_dir)
    lock, refusal, created = None, None, []
    if is_main_process:
        created = [path for path in (folder, *folder.parents) if not path.exists()]
        lock, refusal = _lock_or_refusal(folder)
    [refusal] = broadcast_object_list([refusal])
    if refusal is not None:
        raise InputError(refusal)
    try:
        yield
    finally:
        if lock is not None:
            # Unlinked while still held: a run waiting on this file finds it gone and locks a new one.
            (folder / LOCK_FILE).unlink(missing_ok=True)
            lock.release()
            for path in created:
                try:
                    path.rmdir()
                except OSError:  # the run wrote something: keep it
                    break


def _lock_or_refusal(folder: Path) -> tuple[FileLock | None, str | None]:
    """The held lock on `folder`, or why there is none."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return None, f"--output_dir {folder}: cannot create the folder ({error}). Choose a folder you can write to."
    lock = FileLock(folder / LOCK_FILE, blocking=False, on_acquired=_write_holder)
    try:
        lock.acquire()
    except Timeout:
        try:
            holder = (folder / LOCK_FILE).read_text(encoding="utf-8").strip()
        except FileNotFoundError:  # the holder finished a moment ago
            holder = ""
        return None, (
            f"--output_dir {folder}: another run ({holder or 'process id unknown'}) is writing to this folder, and "
            "two runs in one folder would mix their checkpoints. Wait for that run to finish (rerun the same command "
            "then to continue it), stop it, or choose another --output_dir."
        )
    return lock, None


def _write_holder(lock_descriptor: int) -> None:
    os.ftruncate(lock_descriptor, 0)
    os.write(lock_descriptor, f"process {os.getpid()} on {socket.gethostname()}\n".encode())


def folder_content(folder: Path) -> list[Path]:
    """What the folder holds, its lock file aside."""
    return [path for path in folder.iterdir() if path.name != LOCK_FILE]


def _checkpoints(output_dir: Path) -> list[Path]:
    found = [p for p in output_dir.glob(f"{PREFIX_CHECKPOINT_DIR}-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]))


def _is_complete(checkpoint: Path) -> bool:
    """Whether the Trainer finished writing `checkpoint`: its last file is there and whole (a `kill -9` while the
    Trainer writes trainer_state.json leaves it empty or cut, and a resume from it would fail)."""
    try:
        json.loads((checkpoint / CHECKPOINT_COMPLETE_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True


def last_complete_checkpoint(folder: Path) -> Path | None:
    """The last whole `checkpoint-N` in `folder`, after removing those cut short (e.g. by `kill -9`)."""
    checkpoints = _checkpoints(folder)
    for checkpoint in checkpoints:
        if not _is_complete(checkpoint):
            shutil.rmtree(checkpoint)
    complete = [c for c in checkpoints if c.exists()]
    return complete[-1] if complete else None


def find_existing_run(output_dir: str) -> ExistingRun | None:
    """What an earlier run left in `output_dir`; None when the folder is absent or empty.

    Checkpoints that were cut short (e.g. by `kill -9`) are removed, so the Trainer resumes from
    the last whole one.
    """
    folder = Path(output_dir)
    if not folder.is_dir() or not folder_content(folder):
        return None
    shutil.rmtree(folder / STAGING_DIR, ignore_errors=True)
    last_checkpoint = last_complete_checkpoint(folder)
    config_file = folder / FINISHED_MARKER
    if last_checkpoint is not None:
        config_file = last_checkpoint / FINISHED_MARKER
    if not config_file.is_file():
        leftovers = sorted(p.name for p in folder_content(folder))
        raise InputError(
            f"--output_dir {folder}: the folder is not empty ({', '.join(leftovers[:5])}"
            f"{', ...' if len(leftovers) > 5 else ''}) and holds no SEED pretraining run to continue. "
            "Choose another --output_dir, or pass --overwrite_output_dir to replace its contents."
        )
    return ExistingRun(
        config=json.loads(config_file.read_text()), last_checkpoint=last_checkpoint, model_dir=config_file.parent
    )


def check_export_dir(output_dir: str, overwrite_output_dir: bool) -> None:
    """Refuse (InputError), before any work, an export's --output_dir that is a file, not empty (unless it is to be
    overwritten), or cannot be written."""
    target = Path(output_dir)
    if target.exists() and not target.is_dir():
        raise InputError(f"--output_dir {output_dir}: is a file. Choose a folder.")
    leftovers = [entry for entry in folder_content(target) if entry.name != STAGING_DIR] if target.is_dir() else []
    if leftovers and not overwrite_output_dir:
        raise InputError(
            f"--output_dir {output_dir}: the folder is not empty ({', '.join(sorted(p.name for p in leftovers)[:5])}). "
            "Choose another --output_dir, or pass --overwrite_output_dir to replace its contents."
        )
    check_writable_folder(target, "--output_dir")


def check_writable_folder(folder: Path, flag: str) -> None:
    """Refuse (InputError) a folder that cannot be made or written in (read-only, or below a file), before any work."""
    existing = next(parent for parent in (folder, *folder.parents) if parent.exists())
    try:
        probe = existing / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise InputError(f"{flag} {folder}: cannot write in {existing} ({error.strerror}). Choose another folder.") from None


def check_writable_file(path: Path, flag: str) -> None:
    """Refuse (InputError) a file that cannot be written, before the work whose results it is to hold."""
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
    except OSError as error:
        raise InputError(f"{flag} {path}: cannot be written ({error.strerror}). Choose another file.") from None
    if not existed:
        path.unlink()


def clear_output_dir(output_dir: str) -> None:
    folder = Path(output_dir)
    if folder.is_dir():
        for entry in folder_content(folder):
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


def push_final_model(training_args, commit_message: str, ignore_patterns: tuple[str, ...] = ()) -> None:
    """Upload the final folder as it is (our model card included; checkpoints, hidden files and
    `ignore_patterns` left out) to `--hub_model_id`, or a repository named after the folder."""
    from huggingface_hub import HfApi

    api = HfApi(token=training_args.hub_token)
    repo_id = training_args.hub_model_id or Path(training_args.output_dir).resolve().name
    api.create_repo(repo_id, private=training_args.hub_private_repo, exist_ok=True)
    api.upload_folder(
        repo_id=repo_id,
        folder_path=training_args.output_dir,
        ignore_patterns=["checkpoint-*", "checkpoint-*/**", "*.tmp", ".*", *ignore_patterns],
        commit_message=commit_message,
    )
