"""Corpus files read once, then opened in place: a BEIR `corpus.jsonl` is packed into a folder of the user's cache the
first time it is read, and every later read, by this process or another, opens that folder instead
(`PackedCorpus.open`: texts read from their file as asked for, ids memory-mapped).

Under `accelerate launch` every process loads the training corpus (the training examples are built from it). Read
from the file, each held its own copy of the texts and ids (about 7 GB a process at MS MARCO's 8.8M passages); opened
from the cache, a process holds none of it: the processes of one machine share one copy in the page cache, and a
corpus is read and checked once, by whichever process comes first while the others wait on a file lock. A rerun
opens it in about a second.

The folder is `$SEED_ENCODER_CORPUS_CACHE`, else `$XDG_CACHE_HOME/seed-encoder/corpora` (`~/.cache/...`); set the
variable to `none` to read the file every time. Each source file has one entry, named by its resolved path, which is
packed again when the file's size or modification time changes (as datasets tells a changed local file); an entry
takes about the size of its file, and deleting the folder only costs the next read its packing.

A label-free run's training set (the pairs its `--corpus_file` makes: `finetuning/passage_pairs.py`) is kept the
same way, an entry `pseudo-pairs-*` for each file set, seed and pseudo-query kinds, made again when a file changes:
about twice the file's size (its pseudo-queries and documents; three times with crops, which keep their passages).
"""

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from filelock import FileLock

from .packed_corpus import PackedCorpus

logger = logging.getLogger(__name__)

CACHE_VARIABLE = "SEED_ENCODER_CORPUS_CACHE"
SOURCE_FILE = "source.json"  # what the entry was packed from; written last, so an entry without it is incomplete
FORMAT = 2  # the entry's layout: a new layout packs every corpus again (2: the ids mapped, with a hashed index)
T = TypeVar("T")


def corpus_cache_dir() -> Path | None:
    """The folder packed corpora are kept in, or None where `SEED_ENCODER_CORPUS_CACHE` is `none`."""
    configured = os.environ.get(CACHE_VARIABLE)
    if configured and configured.lower() == "none":
        return None
    if configured:
        return Path(configured)
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "seed-encoder" / "corpora"


def source_stamp(source: Path) -> dict:
    status = source.stat()
    return {"source": str(source.resolve()), "size": status.st_size, "mtime_ns": status.st_mtime_ns, "format": FORMAT}


def cache_entry(source: Path, cache: Path) -> Path:
    """The folder in `cache` that holds `source` packed: one a source file, named by its resolved path."""
    return cache / hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:32]


def cached_corpus(source: Path, read: Callable[[], PackedCorpus]) -> PackedCorpus:
    """The corpus `read()` makes of `source`, opened from its cache entry, which is written first where it is
    missing or older than the file. Where the cache is off or cannot be written, `read()` itself, with a warning for
    the latter."""
    cache = corpus_cache_dir()
    if cache is None:
        return read()

    def write(staging: Path) -> None:
        # refuses a bad file before anything is written; freed (a local) before its twin is opened: both at once
        # peaked 67 MB higher at 1M passages
        corpus = read()
        corpus.save(staging)
        logger.info("Packed %s (%d documents) into the corpus cache, which later reads open.", source, len(corpus))

    corpus = cached(cache_entry(source, cache), source_stamp(source), write, PackedCorpus.open)
    return read() if corpus is None else corpus


def cached(entry: Path, stamp: dict, write: Callable[[Path], None], open_entry: Callable[[Path], T]) -> T | None:
    """`open_entry(entry)`, where `write(folder)` first fills the entry when it does not hold `stamp` (what it was made
    from), all under the entry's file lock: one process writes, the others wait and open what it wrote. None (and a
    warning) where the cache cannot be written."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(f"{entry}.lock")
        lock.acquire()
    except OSError as error:
        logger.warning("Working without the corpus cache (%s): %s (set %s=none to skip it).", entry.parent, error, CACHE_VARIABLE)
        return None
    try:
        if not _holds(entry, stamp):
            _write(entry, stamp, write)
        return open_entry(entry)
    finally:
        lock.release()


def _holds(entry: Path, stamp: dict) -> bool:
    try:
        return json.loads((entry / SOURCE_FILE).read_text()) == stamp
    except (OSError, ValueError):
        return False


def _write(entry: Path, stamp: dict, write: Callable[[Path], None]) -> None:
    """The entry written beside its place and moved there whole, so that an interrupted write leaves no entry that
    looks complete; a write that fails (a bad file refused) leaves nothing."""
    # Only the holder of the entry's lock writes it, so any other staging folder is a killed packing's leftover.
    for leftover in entry.parent.glob(f"{entry.name}.writing-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    staging = entry.with_name(f"{entry.name}.writing-{os.getpid()}")
    staging.mkdir()
    try:
        write(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    (staging / SOURCE_FILE).write_text(json.dumps(stamp))
    shutil.rmtree(entry, ignore_errors=True)  # an older packing: processes that opened it keep their open files
    os.replace(staging, entry)
