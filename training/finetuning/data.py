"""Fine-tuning data: training queries over a corpus with their judged positives, and a dev collection.

Three sources give the same shape, so mining, distillation and training never ask where the pairs
came from: a BEIR-layout folder, a JSON-lines file of (query, positive, negatives), or the
passages of a corpus, each making one pseudo-query (crops, a sentence, a title: `pseudo_queries.py`).
"""

import hashlib
import logging
import random
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from datasets import Dataset

from ..data.corpus import embedded_corpus_passages, existing_file, file_format, load_raw_corpus
from ..common.errors import InputError
from ..common.json_lines import json_lines
from ..data.collection import Collection, load_collection
from .arguments import FinetuningDataArguments
from .passage_pairs import passage_training_set
from .pseudo_queries import CROPS, TITLES
from .training_set import DEV_SPLIT, TrainingSet

logger = logging.getLogger(__name__)

PAIR_FIELDS = ("query", "positive")


def _split_off(query_ids: list[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """(kept, held out): a seeded, order-independent draw of `fraction` of the ids."""
    shuffled = sorted(query_ids)
    random.Random(seed).shuffle(shuffled)
    held_out = max(1, round(len(shuffled) * fraction))
    return shuffled[held_out:], shuffled[:held_out]


def _few_shot(query_ids: list[str], max_queries: int | None, seed: int) -> list[str]:
    if max_queries is None or max_queries >= len(query_ids):
        return query_ids
    return random.Random(seed).sample(sorted(query_ids), max_queries)


def _subset(collection: Collection, query_ids, name: str) -> Collection:
    return Collection(
        name=name,
        corpus=collection.corpus,
        queries={query_id: collection.queries[query_id] for query_id in query_ids},
        qrels={query_id: collection.qrels[query_id] for query_id in query_ids},
    )


def _with_held_out_dev(
    whole: Collection, dev_fraction: float, max_train_queries: int | None, seed: int, name: str, source: str
) -> TrainingSet:
    """Training queries of `whole` with `dev_fraction` of them held out as the dev collection (same corpus)."""
    query_ids, dev_ids = _split_off(_with_positives(whole), dev_fraction, seed)
    query_ids = _few_shot(query_ids, max_train_queries, seed)
    kept = _subset(whole, query_ids, "train")
    few_shot = f" (few-shot: drawn with seed {seed})" if max_train_queries else ""
    return TrainingSet(
        queries=kept.queries,
        corpus=whole.corpus,
        qrels=kept.qrels,
        dev=_subset(whole, dev_ids, DEV_SPLIT),
        name=name,
        description=f"{source}: {len(query_ids)} training queries{few_shot}; dev: {len(dev_ids)} of them held out",
    )


def _with_positives(collection: Collection) -> list[str]:
    return [query_id for query_id, judged in collection.qrels.items() if any(rel > 0 for rel in judged.values())]


def training_set_from_beir(
    data_dir: str, dev_fraction: float, max_train_queries: int | None, seed: int, skip_unknown_ids: bool = False
) -> TrainingSet:
    """The train split of a BEIR folder; dev is qrels/dev.tsv when present, else held-out training queries."""
    train = load_collection(data_dir, "train", skip_unknown_ids=skip_unknown_ids)
    name = Path(data_dir).name
    source = f"`{name}` train split"
    if not (Path(data_dir) / "qrels" / f"{DEV_SPLIT}.tsv").is_file():
        return _with_held_out_dev(train, dev_fraction, max_train_queries, seed, name, source)
    dev = load_collection(data_dir, DEV_SPLIT, skip_unknown_ids=skip_unknown_ids, corpus=train.corpus)
    query_ids = _few_shot(_with_positives(train), max_train_queries, seed)
    kept = _subset(train, query_ids, "train")
    few_shot = f" (few-shot: drawn with seed {seed})" if max_train_queries else ""
    return TrainingSet(
        queries=kept.queries, corpus=train.corpus, qrels=kept.qrels, dev=dev, name=name,
        description=f"{source}: {len(query_ids)} training queries{few_shot}; dev: the collection's dev split",
    )


def with_judged_dev(training_set: TrainingSet, data_dir: str, split: str, skip_unknown_ids: bool = False) -> TrainingSet:
    """`training_set` judged on the real queries of a BEIR folder's `split` (with its own corpus) rather than on
    the held-out queries it made; the held-out ones are still never trained on."""
    training_set.dev = load_collection(data_dir, split, skip_unknown_ids=skip_unknown_ids)
    training_set.dev.name = DEV_SPLIT
    training_set.description += (
        f"; judged on {len(training_set.dev.queries)} real queries of `{Path(data_dir).name}` (qrels/{split}.tsv) "
        "in place of those"
    )
    return training_set


def _text_id(prefix: str, text: str) -> str:
    return f"{prefix}{hashlib.sha1(text.encode()).hexdigest()[:16]}"


PAIRS_FORMAT = 'Each line is one JSON object like {"query": "...", "positive": "...", "negatives": ["...", ...]}.'


def _read_pairs(path: Path) -> list[dict]:
    records = []
    for line_number, record in json_lines(path, PAIR_FIELDS, hint=PAIRS_FORMAT, argument="--train_file"):
        negatives = record.get("negatives", [])
        texts = [record["query"], record["positive"], *negatives] if isinstance(negatives, list) else [None]
        if not all(isinstance(text, str) for text in texts):
            raise InputError(
                f"--train_file {path}, line {line_number}: 'query' and 'positive' must be texts and 'negatives' a list "
                f"of texts. {PAIRS_FORMAT}"
            )
        records.append({"query": record["query"], "positive": record["positive"], "negatives": negatives})
    if not records:
        raise InputError(f"--train_file {path}: no pairs (the file is empty or blank). {PAIRS_FORMAT}")
    return records


def training_set_from_pairs(path: str, dev_fraction: float, max_train_queries: int | None, seed: int) -> TrainingSet:
    """Pairs from JSON lines; the corpus is every positive and negative text, so mining searches among them."""
    records = _read_pairs(Path(path))
    queries, corpus, qrels, negatives = {}, {}, {}, {}
    for record in records:
        query_id, doc_id = _text_id("q", record["query"]), _text_id("d", record["positive"])
        queries[query_id], corpus[doc_id] = record["query"], record["positive"]
        qrels.setdefault(query_id, {})[doc_id] = 1
        for text in record["negatives"]:
            corpus[_text_id("d", text)] = text
            negatives.setdefault(query_id, []).append(_text_id("d", text))
    whole = Collection(name="train", corpus=corpus, queries=queries, qrels=qrels)
    name = Path(path).name
    training_set = _with_held_out_dev(whole, dev_fraction, max_train_queries, seed, name, f"`{name}`")
    training_set.given_negatives = {query_id: ids for query_id, ids in negatives.items() if query_id in training_set.queries}
    return training_set


class ColumnRecords(Iterable):
    """(text, None) for each text of a dataset's column, read in order a batch at a time, each time they are iterated:
    iterating the column itself makes a dict of every row, 22 s a pass over 1M passages where batches of 4,096 took
    2.7 s."""

    BATCH = 4096

    def __init__(self, dataset: Dataset, column: str):
        self._dataset, self._column = dataset, column

    def __iter__(self) -> Iterator[tuple[str, None]]:
        for batch in self._dataset.iter(batch_size=self.BATCH):
            yield from ((text, None) for text in batch[self._column])


class TitledRecords(Iterable):
    """The (text, title) of every record of JSON-lines corpus files whose text is not blank (a record without a title
    has None), read from the files each time they are iterated, so that no list of them is held; a bad record is
    refused naming its file and line."""

    def __init__(self, files: list[str], text_column: str, title_column: str):
        self.files, self.text_column, self.title_column = files, text_column, title_column
        self._warned = False
        for name in files:
            if file_format(Path(name), "--corpus_file") != "json":
                raise InputError(
                    f"--corpus_file {name}: --pseudo_queries titles reads each record's {title_column!r} field, so "
                    "the corpus must be JSON lines (.jsonl) like a BEIR corpus.jsonl. Pass such a file, or drop titles."
                )

    def __iter__(self) -> Iterator[tuple[str, str | None]]:
        text_column, title_column = self.text_column, self.title_column
        hint = f'Each line is one JSON object like {{"{title_column}": "...", "{text_column}": "..."}}.'
        texts = blank = 0
        for name in self.files:
            for line_number, record in json_lines(Path(name), (text_column,), hint=hint, argument="--corpus_file"):
                text, title = record[text_column], record.get(title_column)
                if not isinstance(text, str) or not (title is None or isinstance(title, str)):
                    raise InputError(
                        f"--corpus_file {name}, line {line_number}: {text_column!r} and {title_column!r} must be "
                        f"texts. {hint}"
                    )
                if text.strip():
                    texts += 1
                    yield text, title
                else:
                    blank += 1
        if blank and not texts:
            raise InputError(
                f"--corpus_file {', '.join(self.files)}: every record's {text_column!r} is empty ({blank} records). A "
                f"title makes the pseudo-query and the record's text is the document it must find, so records need "
                f"texts. Pass a corpus whose records have them, or name the field that holds them with --text_column."
            )
        if blank and not self._warned:
            self._warned = True
            logger.warning("--corpus_file: %d of %d records have an empty %r and are left out.", blank, blank + texts, text_column)


def titled_passages(files: list[str], text_column: str, title_column: str) -> tuple[list[str], list[str | None]]:
    """(texts, titles) of JSON-lines corpus files, blank texts left out; a record without a title has None."""
    records = list(TitledRecords(files, text_column, title_column))
    return [text for text, _ in records], [title for _, title in records]


def training_set_from_passages(
    passages: Sequence[str], dev_fraction: float, max_train_queries: int | None, seed: int, name: str, description: str,
    kinds: tuple[str, ...] = (CROPS,), titles: Sequence[str | None] | None = None, dev_kinds: tuple[str, ...] | None = None,
) -> TrainingSet:
    """Unsupervised pairs: each passage (with its title, where `titles` gives one) makes one pseudo-query and the
    document it must find, of a kind among `kinds` (`pseudo_queries.py`); the held-out passages make theirs of a kind
    among `dev_kinds` when given (default: `kinds`). Written to a folder of this process and read from it in place
    (`passage_pairs.py`)."""
    records = list(zip(passages, titles if titles is not None else [None] * len(passages)))
    return passage_training_set(
        lambda: records, kinds, dev_kinds, dev_fraction, max_train_queries, seed, name, description
    )


def load_training_set(data_args: FinetuningDataArguments, seed: int) -> TrainingSet:
    """The run's training set from whichever source its flags name, judged on `--dev_data_dir`'s real queries
    where given (training stays on its own queries)."""
    training_set = made_training_set(data_args, seed)
    if data_args.dev_data_dir:
        training_set = with_judged_dev(training_set, data_args.dev_data_dir, data_args.dev_split, data_args.skip_unknown_ids)
        logger.info(
            "The start and the rounds are judged on %d real queries of %s (qrels/%s.tsv), not on held-out training "
            "queries.", len(training_set.dev.queries), data_args.dev_data_dir, data_args.dev_split,
        )
    return training_set


def made_training_set(data_args: FinetuningDataArguments, seed: int) -> TrainingSet:
    """A BEIR folder's train split, a pairs file, or pseudo-queries made of a corpus file's passages (without any of
    them, of CPython's bundled documentation: the no-argument run)."""
    if data_args.data_dir:
        return training_set_from_beir(
            data_args.data_dir, data_args.dev_fraction, data_args.max_train_queries, seed, data_args.skip_unknown_ids
        )
    if data_args.train_file:
        return training_set_from_pairs(data_args.train_file, data_args.dev_fraction, data_args.max_train_queries, seed)
    kinds, dev_kinds = tuple(data_args.pseudo_queries), tuple(data_args.dev_pseudo_queries or ())
    if not data_args.corpus_file:
        return training_set_from_passages(
            embedded_corpus_passages(), data_args.dev_fraction, data_args.max_train_queries, seed,
            "CPython documentation (pydoc_data)", "CPython's bundled reference documentation (`pydoc_data.topics`)",
            kinds, None, dev_kinds,
        )
    for file in data_args.corpus_file:  # before the cache looks at them: a cached entry spares reading them
        existing_file(file, "--corpus_file")
    with_titles = TITLES in kinds + dev_kinds

    def read_records() -> Iterable[tuple[str, str | None]]:
        """(passage, title) a record, read from the files each time they are iterated."""
        if with_titles:
            return TitledRecords(data_args.corpus_file, data_args.text_column, data_args.title_column)
        corpus = load_raw_corpus(data_args.corpus_file, None, data_args.text_column, argument="--corpus_file")
        return ColumnRecords(corpus, data_args.text_column)  # the memory-mapped dataset's, in order

    return passage_training_set(
        read_records, kinds, dev_kinds, data_args.dev_fraction, data_args.max_train_queries, seed,
        ", ".join(Path(file).name for file in data_args.corpus_file),
        ", ".join(f"`{Path(file).name}`" for file in data_args.corpus_file),
        corpus_files=data_args.corpus_file,
        columns=(data_args.text_column, data_args.title_column if with_titles else None),
    )
