"""Corpus embeddings on disk, so a second evaluation of the same model on the same corpus does not re-encode it."""

import hashlib
import json
import os
from pathlib import Path

import numpy as np


def default_cache_dir() -> str:
    """`$XDG_CACHE_HOME/seed-encoder/embeddings`, else `~/.cache/seed-encoder/embeddings`."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "seed-encoder", "embeddings")


def folder_fingerprint(path: str) -> str:
    """A hash of the files of a model folder (names and contents): any change to weights, config, tokenizer or
    modules gives another fingerprint. Training checkpoints (`checkpoint-*`) and hidden files are not the model."""
    digest = hashlib.sha256()
    folder = Path(path)
    files = [
        p for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith((".", "checkpoint-")) for part in p.relative_to(folder).parts)
    ]
    for file in sorted(files):
        digest.update(str(file.relative_to(folder)).encode() + b"\0")
        with file.open("rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()


def cache_file(cache_dir: str, *parts: object) -> Path:
    """The file for embeddings identified by `parts` (anything JSON can write, e.g. model identity and corpus hash)."""
    key = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
    return Path(cache_dir) / f"{key}.npy"


def load_embeddings(path: Path, rows: int) -> np.ndarray | None:
    """The cached embeddings, or None when absent or not `rows` long."""
    if not path.is_file():
        return None
    embeddings = np.load(path)
    return embeddings if embeddings.shape[0] == rows else None


def save_embeddings(path: Path, embeddings: np.ndarray) -> None:
    """Write atomically: a reader never sees a half-written file, and concurrent writers leave one whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    with partial.open("wb") as handle:
        np.save(handle, embeddings)
    os.replace(partial, path)
