"""The training set a corpus' passages make (label-free fine-tuning), written to a folder as the passages are read and
opened from it in place.

Each passage makes one pseudo-query and the document it must find (`pseudo_queries.py`). Made in memory, every
pair, its judgment and the passage a crop came from were Python objects on every process of `accelerate launch`,
before the dev split and `--max_train_queries` cut them down: 1.8 GB held at 1M passages (2.6 GB at its peak;
`benchmarks/records/scale.md`). Written, the queries, documents and crop passages are packed files (`PackedCorpus`)
read through the page cache, the training queries a view of some of their rows, and the judgments implied (each
query judges the document made with it); a process holds the dev split's queries and a few bytes a pair (70 MB at
1M). With `--corpus_file` the folder is an entry of the corpus cache, made by the first process and opened by the
others, and by every rerun with the same file, seed and kinds; otherwise a folder of the process, removed at exit.

The draws are those the pairs were first made with, seed for seed: one random stream over the passages in order
(the dev's kinds, where they differ, a second one over the held-out passages in order), the dev split a seeded
shuffle of the ids in their string order, the few-shot cut a seeded sample of them in that order.
"""

import atexit
import hashlib
import json
import random
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np

from ..common.errors import InputError
from ..data.collection import Collection
from ..data.corpus_cache import cached, corpus_cache_dir, source_stamp
from ..data.packed_corpus import ID_CHUNK, PackedCorpus, PackedCorpusWriter
from .pseudo_queries import (
    CROPS, LEADS, MIN_CROP_WORDS, SENTENCE_END, SENTENCES, TITLES, describe_kinds, kinds_for, pseudo_pair,
)
from .training_set import DEV_SPLIT, TrainingSet

FORMAT = 1  # the folder's layout: a new layout makes every entry again
QUERIES, DOCUMENTS, CROP_PASSAGES, DEV_QUERIES = "queries", "documents", "crop_passages", "dev_queries"
INDICES_FILE, TRAINING_ROWS_FILE, CROP_ROWS_FILE, MADE_FILE = "indices.npy", "training_rows.npy", "crops.npy", "made.json"


def query_id(index: int) -> str:
    return f"q{index}"


def document_id(query: str) -> str:
    """The id of the document made with pseudo-query `query` (both of passage i)."""
    return f"d{query.removeprefix('q')}"


class RowsOf(Mapping):
    """Some rows of a packed corpus, in a given order, read like a dict of them (id -> text): a training set's
    queries or crop passages, without a dict or a set of their ids."""

    def __init__(self, packed: PackedCorpus, rows: np.ndarray):
        self._packed, self._rows = packed, np.asarray(rows, dtype=np.int64)
        self._member = np.zeros(len(packed), dtype=bool)
        self._member[self._rows] = True

    def _row(self, key) -> int | None:
        row = self._packed.rows.get(key)
        return row if row is not None and self._member[row] else None

    def __getitem__(self, key) -> str:
        row = self._row(key)
        if row is None:
            raise KeyError(key)
        return self._packed.text_at(row)

    def __contains__(self, key) -> bool:
        return self._row(key) is not None

    def __iter__(self) -> Iterator[str]:
        ids = self._packed.ids
        for start in range(0, len(self._rows), ID_CHUNK):
            for row in self._rows[start : start + ID_CHUNK].tolist():
                yield ids[row]

    def __len__(self) -> int:
        return len(self._rows)


class OwnDocumentQrels(Mapping):
    """The judgments of pseudo-queries: each judges the one document made with it, {document id: 1}."""

    def __init__(self, queries: Mapping[str, str]):
        self._queries = queries

    def __getitem__(self, query: str) -> dict[str, int]:
        if query not in self._queries:
            raise KeyError(query)
        return {document_id(query): 1}

    def __iter__(self) -> Iterator[str]:
        return iter(self._queries)

    def __len__(self) -> int:
        return len(self._queries)


def in_string_order(items: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """`items` sorted by the ids of their passage `indices` as strings ("q10" before "q2"), the order the ids were
    sorted in when the pairs were a dict."""
    return items[np.argsort(indices.astype(str), kind="stable")]


def held_out_split(indices: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held out) passage indices: the seeded shuffle `data._split_off` makes of their ids, on the indices (a
    shuffle's swaps depend on the length and the draws alone)."""
    shuffled = in_string_order(indices, indices)
    random.Random(seed).shuffle(shuffled)
    held_out = max(1, round(len(shuffled) * fraction))
    return shuffled[held_out:], shuffled[:held_out]


def few_shot_rows(rows: np.ndarray, indices: np.ndarray, max_queries: int | None, seed: int) -> np.ndarray:
    """The rows `data._few_shot` keeps of the training queries at `rows` (passage `indices[row]` each): a seeded
    sample of them in their ids' string order (a sample picks positions by the length and the draws alone)."""
    if max_queries is None or max_queries >= len(rows):
        return rows
    ordered = in_string_order(rows, indices[rows])
    return ordered[random.Random(seed).sample(range(len(ordered)), max_queries)]


def passage_training_set(
    read_records: Callable[[], Iterable[tuple[str, str | None]]], kinds: tuple[str, ...],
    dev_kinds: tuple[str, ...] | None, dev_fraction: float, max_train_queries: int | None, seed: int, name: str,
    description: str, corpus_files: list[str] | None = None, columns: tuple[str, str | None] = ("text", None),
) -> TrainingSet:
    """The training set the (passage, title) records `read_records()` gives make, each passage one pair of a kind
    among `kinds`, the held-out ones of `dev_kinds` where given. Made of `corpus_files` (read through `columns`: the
    text's and the title's, where titles are read), it is an entry of the corpus cache: `read_records` is called only
    by the process that writes it."""
    dev_kinds = dev_kinds if dev_kinds and set(dev_kinds) != set(kinds) else None

    def write(folder: Path) -> None:
        write_passage_pairs(folder, read_records(), kinds, dev_kinds, dev_fraction, seed, description)

    def open_folder(folder: Path) -> TrainingSet:
        return open_passage_pairs(folder, max_train_queries, seed, name, description)

    cache = corpus_cache_dir()
    if corpus_files and cache is not None:
        key = {
            "sources": [str(Path(file).resolve()) for file in corpus_files], "columns": list(columns),
            "kinds": list(kinds), "dev_kinds": list(dev_kinds or ()), "dev_fraction": dev_fraction, "seed": seed,
        }
        entry = cache / f"pseudo-pairs-{hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]}"
        # Named without the files' sizes and times, so that a changed file's pairs replace its entry.
        stamp = {**key, "stamps": [source_stamp(Path(file)) for file in corpus_files], "format": FORMAT}
        training_set = cached(entry, stamp, write, open_folder)
        if training_set is not None:
            return training_set
    folder = Path(tempfile.mkdtemp(prefix="seed-encoder-pseudo-pairs-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    write(folder)
    return open_folder(folder)


def write_passage_pairs(
    folder: Path, records: Iterable[tuple[str, str | None]], kinds: tuple[str, ...], dev_kinds: tuple[str, ...] | None,
    dev_fraction: float, seed: int, description: str,
) -> None:
    """Make each (passage, title) record's pair and write them to `folder` (which must exist); the held-out passages'
    dev pairs are of `dev_kinds` where given. The records are read in order, twice (so they must be iterable twice):
    first without a draw, to refuse before anything is written a corpus that makes fewer than 10 pairs or no dev pair,
    and to split off the dev."""
    makes, makes_dev = bytearray(), bytearray()  # a byte a record: bools, known once read
    for passage, title in records:
        possible = bool(kinds_for(passage, title, kinds))
        makes.append(possible)
        makes_dev.append(bool(dev_kinds) and possible and bool(kinds_for(passage, title, dev_kinds)))
    makes, makes_dev = (np.frombuffer(flags, dtype=bool) for flags in (makes, makes_dev))
    indices = np.flatnonzero(makes)
    if len(indices) < 10:
        raise InputError(too_few_pseudo_queries(description, len(indices), records, kinds))
    training, held_out = held_out_split(indices, dev_fraction, seed)
    if dev_kinds and not makes_dev[held_out].any():
        raise InputError(
            f"{description}: none of the {len(held_out)} held-out passages makes a pseudo-query of "
            f"--dev_pseudo_queries {' '.join(dev_kinds)}. Pass other kinds, or drop the flag to judge on training's kinds."
        )
    is_held_out = np.zeros(len(makes), dtype=bool)
    is_held_out[held_out] = True

    rng, dev_rng = random.Random(seed), random.Random(f"dev-{seed}")
    made, crops, dev_queries = dict.fromkeys(kinds, 0), np.zeros(len(indices), dtype=bool), {}
    folders = {name: folder / name for name in (QUERIES, DOCUMENTS, CROP_PASSAGES, DEV_QUERIES)}
    for path in folders.values():
        path.mkdir()
    queries, documents = PackedCorpusWriter(folders[QUERIES]), PackedCorpusWriter(folders[DOCUMENTS])
    crop_passages = PackedCorpusWriter(folders[CROP_PASSAGES]) if CROPS in kinds else None
    row = 0
    for index, (passage, title) in enumerate(records):
        if not makes[index]:
            continue
        pair = pseudo_pair(passage, title, kinds, rng)
        document = pair.document
        if is_held_out[index] and not dev_kinds:
            dev_queries[index] = pair.query
        elif makes_dev[index] and is_held_out[index]:
            # The held-out document becomes the dev pair's (e.g. its sentence cut out); it is never trained on.
            dev_pair = pseudo_pair(passage, title, dev_kinds, dev_rng)
            document, dev_queries[index] = dev_pair.document, dev_pair.query
        queries.add(query_id(index), pair.query)
        documents.add(document_id(query_id(index)), document)
        if crop_passages is not None:
            crop_passages.add(query_id(index), passage if pair.kind == CROPS else "")
        made[pair.kind] += 1
        crops[row] = pair.kind == CROPS
        row += 1
    for writer in (queries, documents, crop_passages):
        if writer is not None:
            writer.close()
    # The dev's queries in the order they are judged in: the shuffle's, or the passages' where remade.
    dev = PackedCorpusWriter(folders[DEV_QUERIES])
    for index in (sorted(dev_queries) if dev_kinds else held_out.tolist()):
        dev.add(query_id(index), dev_queries[index])
    dev.close()
    np.save(folder / INDICES_FILE, indices)
    np.save(folder / TRAINING_ROWS_FILE, np.searchsorted(indices, training))
    np.save(folder / CROP_ROWS_FILE, crops)
    (folder / MADE_FILE).write_text(json.dumps({
        "kinds": list(kinds), "made": made, "held_out": len(held_out), "dev_kinds": list(dev_kinds or ()),
        "dev_remade": len(dev_queries),
    }))


def open_passage_pairs(folder: Path, max_train_queries: int | None, seed: int, name: str, description: str) -> TrainingSet:
    """The training set written in `folder`, its training queries cut to a seeded `max_train_queries` where given."""
    made = json.loads((folder / MADE_FILE).read_text())
    indices = np.load(folder / INDICES_FILE, mmap_mode="r")
    rows = few_shot_rows(np.load(folder / TRAINING_ROWS_FILE), indices, max_train_queries, seed)
    corpus = PackedCorpus.open(folder / DOCUMENTS)
    queries = RowsOf(PackedCorpus.open(folder / QUERIES), rows)
    dev_queries = dict(PackedCorpus.open(folder / DEV_QUERIES).items())
    dev = Collection(DEV_SPLIT, corpus, dev_queries, {query: {document_id(query): 1} for query in dev_queries})
    passages = {}
    if CROPS in made["kinds"]:
        passages = RowsOf(PackedCorpus.open(folder / CROP_PASSAGES), rows[np.load(folder / CROP_ROWS_FILE)[rows]])
    counts = ", ".join(f"{count} {kind}" for kind, count in made["made"].items())
    few_shot = f" (few-shot: drawn with seed {seed})" if max_train_queries else ""
    description = (
        f"{description}, one pseudo-query a passage ({counts}): {describe_kinds(tuple(made['kinds']))}: "
        f"{len(rows)} training queries{few_shot}; dev: {made['held_out']} of them held out"
    )
    if made["dev_kinds"]:
        description += (
            f" and made {made['dev_remade']} pseudo-queries of another kind: {describe_kinds(tuple(made['dev_kinds']))}"
        )
    return TrainingSet(
        queries=queries, corpus=corpus, qrels=OwnDocumentQrels(queries), dev=dev, name=name, description=description,
        passages=passages,
    )


def too_few_pseudo_queries(
    description: str, made: int, records: Iterable[tuple[str, str | None]], kinds: tuple[str, ...]
) -> str:
    """Why the passages made fewer than 10 pseudo-queries, and what to do: a corpus that is too small only when no
    kind asked for is impossible for the corpus as a whole (no sentence-ending punctuation, no titles)."""
    causes = []
    if {SENTENCES, LEADS} & set(kinds) and not any(SENTENCE_END.search(passage) for passage, _ in records):
        causes.append(
            "no passage has a sentence end (., ! or ? before the next sentence), so none splits into the two "
            "sentences that sentences and leads need"
        )
    if TITLES in kinds and not any(title and title.strip() for _, title in records):
        causes.append("no record with a text has a title (--title_column)")
    what = (
        f"only {made} passages make a pseudo-query of the kinds asked for ({', '.join(kinds)}: crops need "
        f"{2 * MIN_CROP_WORDS} words or more, sentences and leads two sentences, titles a title and a text)"
    )
    if not causes:
        return f"{description}: {what}; unsupervised pairs need at least 10. Pass a larger --corpus_file, or other --pseudo_queries."
    instead = (
        "a larger --corpus_file" if CROPS in kinds
        else "--pseudo_queries crops (random spans of a passage, which need neither punctuation nor titles)"
    )
    return f"{description}: {what}: {'; '.join(causes)}. Pass {instead}, or a corpus with punctuated text or titles."
