"""Corpus embeddings on disk, so a second evaluation of the same model on the same corpus does not re-encode it.

Dense embeddings are kept as `.npy` arrays, sparse ones (SPLADE) as `.npz` CSR matrices."""

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import torch
from scipy import sparse

Embeddings = np.ndarray | sparse.csr_matrix
# How a dense corpus' embeddings are stored (cache file, memory map); they are searched as float32 either way.
EMBEDDING_DTYPES = ("float32", "float16")

logger = logging.getLogger(__name__)


def default_cache_dir() -> str:
    """`$XDG_CACHE_HOME/seed-encoder/embeddings`, else `~/.cache/seed-encoder/embeddings`."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "seed-encoder", "embeddings")


def cache_dir_or_none(flag_value: str) -> str | None:
    """A `--cache_dir` flag's folder, or None (no cache: every corpus encoded afresh) for 'none'."""
    return None if flag_value.lower() == "none" else flag_value


def weights_fingerprint(model: torch.nn.Module) -> str:
    """A hash of a model's weights in memory (every parameter and buffer, by name): the identity the cache keys on,
    whether the model was loaded from a folder or is being trained. Any optimizer step gives another fingerprint;
    the same weights saved and loaded again, or loaded from another folder, give the same one, so a fine-tuning run
    and `training/evaluate.py` share the encodings of the same weights (the starting model's, the final one's)."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}\0{flat.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(flat.view(torch.uint8).numpy())
    return digest.hexdigest()


def tokenizer_fingerprint(tokenizer) -> str:
    """A hash of what a tokenizer does to text (vocabulary, normalisation, pre-tokenisation, special tokens): the same
    weights behind another tokenizer encode other vectors."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        description = json.loads(backend.to_str())
        for per_call_state in ("truncation", "padding"):  # set by transformers at each call, not the tokenizer's own
            description.pop(per_call_state, None)
    else:
        description = {"class": type(tokenizer).__name__, "vocabulary": sorted(tokenizer.get_vocab().items())}
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()


def cache_file(cache_dir: str, *parts: object, suffix: str = ".npy") -> Path:
    """The file for embeddings identified by `parts` (anything JSON can write, e.g. model identity and corpus hash)."""
    key = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
    return Path(cache_dir) / f"{key}{suffix}"


def model_cache_file(
    cache_dir: str | None, cache_key: str | None, model, texts_fingerprint: str, suffix: str = ".npy"
) -> Path | None:
    """The file for a model's embeddings of a corpus (None without a cache folder or key): keyed by `cache_key`
    (the weights' identity, `weights_fingerprint(model)`), the tokenizer, the model's modules (pooling,
    normalisation, ...), max_seq_length (kept on the tokenizer, outside the modules' configuration), its prompts
    and the corpus' texts in order (`corpus_fingerprints(corpus).texts`: the same texts under other ids share it)."""
    if cache_dir is None or cache_key is None:
        return None
    modules = [(type(module).__name__, module.get_config_dict()) for module in model]
    return cache_file(
        cache_dir, cache_key, tokenizer_fingerprint(model.tokenizer), modules, model.max_seq_length, model.prompts,
        texts_fingerprint, suffix=suffix,
    )


def cached_embeddings(path: Path | None, rows: int, encode: Callable[[], Embeddings]) -> tuple[Embeddings, bool]:
    """The `rows` embeddings kept in `path`, else those `encode()` returns, then kept there; and whether they were
    read from the cache."""
    cached = load_embeddings(path, rows) if path is not None else None
    if cached is not None:
        return cached, True
    embeddings = encode()
    if path is not None:
        save_embeddings(path, embeddings)
        if not sparse.issparse(embeddings):
            return load_embeddings(path, rows), False  # the file, mapped: the encoded copy is freed on return
    return embeddings, False


def load_embeddings(path: Path, rows: int) -> Embeddings | None:
    """The cached embeddings, or None when absent or not `rows` long: a CSR matrix from a `.npz` file, or a dense
    matrix memory-mapped read-only from a `.npy` file (pages are read as they are used, and the operating system may
    drop them again, so a corpus's matrix need not fit in memory beside the index built from it)."""
    if not path.is_file():
        return None
    embeddings = sparse.load_npz(path).tocsr() if path.suffix == ".npz" else np.load(path, mmap_mode="r")
    return embeddings if embeddings.shape[0] == rows else None


def save_embeddings(path: Path, embeddings: Embeddings) -> None:
    """Write atomically: a reader never sees a half-written file, and concurrent writers leave one whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    with partial.open("wb") as handle:
        if sparse.issparse(embeddings):
            sparse.save_npz(handle, embeddings)
        else:
            np.save(handle, embeddings)
    os.replace(partial, path)


class CacheLedger:
    """The cache files one run wrote, by the weights that encoded them, so that the run can remove those of weights it
    did not publish: at MS MARCO size each is 13.5 GB (384 dimensions), and a fine-tuning run encodes the corpus with
    every round's weights. Files the run only read, and files other runs wrote, are never touched. The ledger lives in
    memory: a run interrupted and resumed leaves the files of the weights it wrote before the interruption."""

    def __init__(self):
        self.written: list[tuple[str, Path]] = []  # (weights' cache key, file)

    def record(self, cache_key: str, path: Path) -> None:
        self.written.append((cache_key, path))

    def evict(self, keep: Iterable[str]) -> tuple[int, int]:
        """Remove the written files of every cache key not in `keep`; (files removed, bytes freed)."""
        keep = set(keep)
        removed, freed = 0, 0
        for cache_key, path in self.written:
            if cache_key in keep or not path.is_file():
                continue
            freed += path.stat().st_size
            path.unlink()
            removed += 1
        self.written = [(cache_key, path) for cache_key, path in self.written if cache_key in keep]
        if removed:
            logger.info(
                "Removed %d cached corpus encoding(s) of weights this run did not publish (%.1f MB) from %s.",
                removed, freed / 2**20, path.parent,
            )
        return removed, freed
