"""Fine-tuning data: training queries over a corpus with their judged positives, and a dev collection.

Three sources give the same shape, so mining, distillation and training never ask where the pairs
came from: a BEIR-layout folder, a JSON-lines file of (query, positive, negatives), or the
passages of a corpus, each making one pseudo-query (crops, a sentence, a title: `pseudo_queries.py`).
"""

import hashlib
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..data.corpus import embedded_corpus_passages, file_format, load_raw_corpus
from ..common.errors import InputError
from ..common.json_lines import json_lines
from ..data.collection import Collection, load_collection
from ..data.packed_corpus import PackedCorpus
from .arguments import FinetuningDataArguments
from .pseudo_queries import CROPS, LEADS, MIN_CROP_WORDS, SENTENCE_END, SENTENCES, TITLES, describe_kinds, pseudo_pair

logger = logging.getLogger(__name__)

DEV_SPLIT = "dev"
PAIR_FIELDS = ("query", "positive")


@dataclass
class TrainingSet:
    """Training queries, the corpus they are judged against, and what was judged.

    qrels holds every judgment of the training queries (relevance 0 = judged not relevant), so
    mining can exclude every judged positive; `given_negatives` are the negatives a pairs file
    brought along; `dev` is the collection model selection is measured on. `name` is the data's
    name on the model card (a folder's or file's name), `description` says what was made of it.
    """

    queries: dict[str, str]
    corpus: Mapping[str, str]  # packed when read from a BEIR folder or made of passages; a dict when made of pairs
    qrels: dict[str, dict[str, int]]
    dev: Collection
    name: str
    description: str
    given_negatives: dict[str, list[str]] = field(default_factory=dict)
    # Crop pairs only: the passage each crop query was cropped from (fine-tuning draws fresh crops of it).
    passages: dict[str, str] = field(default_factory=dict)

    def positives(self, query_id: str) -> list[str]:
        return [doc_id for doc_id, relevance in self.qrels[query_id].items() if relevance > 0]

    def pairs(self) -> list[tuple[str, str]]:
        """(query id, positive doc id) for every judged positive: one training example each."""
        return [(query_id, doc_id) for query_id in self.queries for doc_id in self.positives(query_id)]


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


def titled_passages(files: list[str], text_column: str, title_column: str) -> tuple[list[str], list[str | None]]:
    """(texts, titles) of JSON-lines corpus files, blank texts left out; a record without a title has None."""
    texts, titles, blank = [], [], 0
    for name in files:
        path = Path(name)
        if file_format(path, "--corpus_file") != "json":
            raise InputError(
                f"--corpus_file {path}: --pseudo_queries titles reads each record's {title_column!r} field, so the "
                "corpus must be JSON lines (.jsonl) like a BEIR corpus.jsonl. Pass such a file, or drop titles."
            )
        hint = f'Each line is one JSON object like {{"{title_column}": "...", "{text_column}": "..."}}.'
        for line_number, record in json_lines(path, (text_column,), hint=hint, argument="--corpus_file"):
            text, title = record[text_column], record.get(title_column)
            if not isinstance(text, str) or not (title is None or isinstance(title, str)):
                raise InputError(
                    f"--corpus_file {path}, line {line_number}: {text_column!r} and {title_column!r} must be texts. {hint}"
                )
            if text.strip():
                texts.append(text)
                titles.append(title)
            else:
                blank += 1
    if blank and not texts:
        raise InputError(
            f"--corpus_file {', '.join(files)}: every record's {text_column!r} is empty ({blank} records). A title makes "
            f"the pseudo-query and the record's text is the document it must find, so records need texts. Pass a "
            f"corpus whose records have them, or name the field that holds them with --text_column."
        )
    if blank:
        logger.warning("--corpus_file: %d of %d records have an empty %r and are left out.", blank, blank + len(texts), text_column)
    return texts, titles


def training_set_from_passages(
    passages: list[str], dev_fraction: float, max_train_queries: int | None, seed: int, name: str, description: str,
    kinds: tuple[str, ...] = (CROPS,), titles: list[str | None] | None = None, dev_kinds: tuple[str, ...] | None = None,
) -> TrainingSet:
    """Unsupervised pairs: each passage (with its title, where `titles` gives one) makes one pseudo-query and the
    document it must find, of a kind among `kinds` (`pseudo_queries.py`); the held-out passages make theirs of a kind
    among `dev_kinds` when given (default: `kinds`)."""
    rng = random.Random(seed)
    queries, corpus, qrels, sources, made = {}, {}, {}, {}, dict.fromkeys(kinds, 0)
    for index, passage in enumerate(passages):
        pair = pseudo_pair(passage, titles[index] if titles else None, kinds, rng)
        if pair is None:
            continue
        query_id, doc_id = f"q{index}", f"d{index}"
        queries[query_id], corpus[doc_id] = pair.query, pair.document
        qrels[query_id] = {doc_id: 1}
        made[pair.kind] += 1
        if pair.kind == CROPS:
            sources[query_id] = passage
    if len(queries) < 10:
        raise InputError(too_few_pseudo_queries(description, len(queries), passages, titles, kinds))
    whole = Collection(name="train", corpus=corpus, queries=queries, qrels=qrels)
    counts = ", ".join(f"{count} {kind}" for kind, count in made.items())
    training_set = _with_held_out_dev(
        whole, dev_fraction, max_train_queries, seed, name,
        f"{description}, one pseudo-query a passage ({counts}): {describe_kinds(kinds)}",
    )
    training_set.passages = {query_id: sources[query_id] for query_id in training_set.queries if query_id in sources}
    if dev_kinds and set(dev_kinds) != set(kinds):
        _remake_dev(training_set, passages, titles, dev_kinds, seed, description)
    # Packed once made (`_remake_dev` writes into it): every process holds it through training.
    training_set.corpus = training_set.dev.corpus = PackedCorpus.from_items(training_set.corpus.items())
    return training_set


def too_few_pseudo_queries(
    description: str, made: int, passages: list[str], titles: list[str | None] | None, kinds: tuple[str, ...]
) -> str:
    """Why the passages made fewer than 10 pseudo-queries, and what to do: a corpus that is too small only when no
    kind asked for is impossible for the corpus as a whole (no sentence-ending punctuation, no titles)."""
    causes = []
    if {SENTENCES, LEADS} & set(kinds) and not any(SENTENCE_END.search(passage) for passage in passages):
        causes.append(
            "no passage has a sentence end (., ! or ? before the next sentence), so none splits into the two "
            "sentences that sentences and leads need"
        )
    if TITLES in kinds and not any(title and title.strip() for title in titles or []):
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


def _remake_dev(
    training_set: TrainingSet, passages: list[str], titles: list[str | None] | None, kinds: tuple[str, ...], seed: int,
    description: str,
) -> None:
    """Give the held-out passages pseudo-queries of other `kinds` than training's. A kind the start already finds
    almost every time (a title's own abstract) cannot tell a round from the start, however much better the round is.
    The passages stay the held-out ones, never trained on; a passage that allows none of `kinds` leaves the dev split."""
    rng = random.Random(f"dev-{seed}")
    queries, qrels = {}, {}
    for query_id in sorted(training_set.dev.queries, key=lambda query_id: int(query_id.removeprefix("q"))):
        index = int(query_id.removeprefix("q"))
        pair = pseudo_pair(passages[index], titles[index] if titles else None, kinds, rng)
        if pair is None:
            continue
        doc_id = f"d{index}"
        # The corpus is the training set's too: the held-out document becomes this pair's (e.g. its sentence cut out).
        queries[query_id], training_set.corpus[doc_id], qrels[query_id] = pair.query, pair.document, {doc_id: 1}
    if not queries:
        raise InputError(
            f"{description}: none of the {len(training_set.dev.queries)} held-out passages makes a pseudo-query of "
            f"--dev_pseudo_queries {' '.join(kinds)}. Pass other kinds, or drop the flag to judge on training's kinds."
        )
    training_set.dev = Collection(name=training_set.dev.name, corpus=training_set.corpus, queries=queries, qrels=qrels)
    training_set.description += f" and made {len(queries)} pseudo-queries of another kind: {describe_kinds(kinds)}"


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
    titles = None
    if data_args.corpus_file:
        if TITLES in data_args.pseudo_queries + (data_args.dev_pseudo_queries or []):
            passages, titles = titled_passages(data_args.corpus_file, data_args.text_column, data_args.title_column)
        else:
            corpus = load_raw_corpus(data_args.corpus_file, None, data_args.text_column, argument="--corpus_file")
            passages = corpus[data_args.text_column]
        name = ", ".join(Path(file).name for file in data_args.corpus_file)
        description = ", ".join(f"`{Path(file).name}`" for file in data_args.corpus_file)
    else:
        passages = embedded_corpus_passages()
        name = "CPython documentation (pydoc_data)"
        description = "CPython's bundled reference documentation (`pydoc_data.topics`)"
    return training_set_from_passages(
        passages, data_args.dev_fraction, data_args.max_train_queries, seed, name, description,
        tuple(data_args.pseudo_queries), titles, tuple(data_args.dev_pseudo_queries or ()),
    )
