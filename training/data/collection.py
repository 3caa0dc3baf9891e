"""A BEIR-layout collection: `corpus.jsonl`, `queries.jsonl` and `qrels/<split>.tsv`, read with checks that name the
file and line of anything wrong."""

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..common.errors import InputError
from ..common.json_lines import json_lines
from .corpus_cache import cached_corpus
from .packed_corpus import PackedCorpus, PackedCorpusBuilder

logger = logging.getLogger(__name__)

DISTINCT_IDS = "Give every record its own _id."
LAYOUT = (
    "A BEIR-layout folder holds corpus.jsonl ({'_id', 'title', 'text'} per line), queries.jsonl ({'_id', 'text'}) "
    "and qrels/<split>.tsv (query-id, corpus-id, score; a header line is allowed)."
)


@dataclass
class Collection:
    """One split of a collection, ready to evaluate: every query here has at least one relevant document."""

    name: str
    corpus: Mapping[str, str]  # document id -> "title text" (the text alone when there is no title); packed when read
    queries: dict[str, str]  # query id -> text, only the queries the split judges
    qrels: dict[str, dict[str, int]]  # query id -> {document id: graded relevance}; 0 = judged not relevant


def _records_by_id(path: Path, required: tuple[str, ...]) -> dict[str, dict]:
    records, lines = {}, {}
    for number, record in json_lines(path, required, hint=LAYOUT):
        identifier = str(record["_id"])
        if identifier in records:
            raise InputError(
                f"{path}, line {number}: _id {identifier!r} was already used on line {lines[identifier]}. {DISTINCT_IDS}"
            )
        records[identifier], lines[identifier] = record, number
    return records


def load_corpus(data_dir: str) -> PackedCorpus:
    """Document id -> title and text joined by a space (the text alone when the title is missing or empty), packed
    as the file is read (no record or line is held beside it), and kept packed in the user's cache, from which every
    later read, by any process, maps it (`corpus_cache.py`)."""
    path = Path(data_dir) / "corpus.jsonl"
    if not path.is_file():
        return _read_corpus(path)  # json_lines refuses it, naming the file
    return cached_corpus(path, lambda: _read_corpus(path))


def _read_corpus(path: Path) -> PackedCorpus:
    builder = PackedCorpusBuilder()
    for number, record in json_lines(path, ("_id", "text"), hint=LAYOUT):
        identifier = str(record["_id"])
        text = f"{record['title']} {record['text']}" if record.get("title") else str(record["text"])
        if not builder.add(identifier, text):
            first = next(line for line, earlier in json_lines(path) if str(earlier["_id"]) == identifier)
            raise InputError(f"{path}, line {number}: _id {identifier!r} was already used on line {first}. {DISTINCT_IDS}")
    return builder.build()


def load_queries(data_dir: str) -> dict[str, str]:
    """Query id -> text, for every query in queries.jsonl (judged or not)."""
    records = _records_by_id(Path(data_dir) / "queries.jsonl", ("_id", "text"))
    return {identifier: str(record["text"]) for identifier, record in records.items()}


def available_splits(data_dir: str) -> list[str]:
    return sorted(path.stem for path in (Path(data_dir) / "qrels").glob("*.tsv"))


def _qrels_file(data_dir: str, split: str) -> Path:
    path = Path(data_dir) / "qrels" / f"{split}.tsv"
    if not path.is_file():
        splits = available_splits(data_dir)
        there = f"the splits there are: {', '.join(splits)}" if splits else f"{path.parent} holds no <split>.tsv file"
        raise InputError(f"--split {split}: {path} does not exist; {there}. {LAYOUT}")
    return path


def _judgments(path: Path) -> list[tuple[int, str, str, int]]:
    """(line number, query id, document id, relevance) for each judgment line. Lines have 3 tab-separated columns
    (BEIR: query-id, corpus-id, score) or 4 (TREC qrels: query, iteration, document, relevance); a first line whose
    relevance column is not an integer is the header."""
    judgments, seen = [], {}
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.rstrip("\n").split("\t") if "\t" in line else line.split()
            if not fields or fields == [""]:
                continue
            if len(fields) not in (3, 4):
                raise InputError(
                    f"{path}, line {number}: {len(fields)} columns; expected 3 (query-id, corpus-id, score) or 4 "
                    "(TREC: query, iteration, document, relevance), tab-separated."
                )
            query_id, document_id, relevance = (fields[0], fields[1], fields[2]) if len(fields) == 3 else (
                fields[0], fields[2], fields[3]
            )
            try:
                grade = int(relevance)
            except ValueError:
                if number == 1:
                    continue
                raise InputError(
                    f"{path}, line {number}: relevance {relevance!r} is not an integer. Use graded integers (0 = not relevant)."
                ) from None
            pair = (query_id.strip(), document_id.strip())
            if pair in seen:
                raise InputError(
                    f"{path}, line {number}: query {pair[0]!r} and document {pair[1]!r} were already judged on line "
                    f"{seen[pair]}. Keep one judgment per pair."
                )
            seen[pair] = number
            judgments.append((number, *pair, grade))
    return judgments


def load_qrels(data_dir: str, split: str) -> dict[str, dict[str, int]]:
    """Query id -> {document id: relevance} as the split's file has them (ids not checked against the corpus)."""
    qrels: dict[str, dict[str, int]] = {}
    for _, query_id, document_id, grade in _judgments(_qrels_file(data_dir, split)):
        qrels.setdefault(query_id, {})[document_id] = grade
    return qrels


def _describe_unknown(number: int, query_id: str, document_id: str, queries: dict) -> str:
    if query_id not in queries:
        return f"line {number}: query {query_id!r} is not in queries.jsonl"
    return f"line {number}: document {document_id!r} is not in corpus.jsonl"


def load_collection(
    data_dir: str, split: str, skip_unknown_ids: bool = False, corpus: Mapping[str, str] | None = None
) -> Collection:
    """The split's judged queries, their judgments and the whole corpus (`corpus`: one already loaded from
    `data_dir`, to share it between splits).

    Judgments naming a query or document that does not exist are an error, or are left out with
    `skip_unknown_ids`. Queries without any relevant judgment are left out: no metric is defined for them (as in
    trec_eval)."""
    if not Path(data_dir).is_dir():
        raise InputError(f"--data_dir {data_dir}: no such folder. {LAYOUT}")
    qrels_path = _qrels_file(data_dir, split)
    corpus = load_corpus(data_dir) if corpus is None else corpus
    all_queries = load_queries(data_dir)
    judgments = _judgments(qrels_path)
    unknown = [j for j in judgments if j[1] not in all_queries or j[2] not in corpus]
    if unknown and not skip_unknown_ids:
        examples = "; ".join(_describe_unknown(*j[:3], all_queries) for j in unknown[:3])
        raise InputError(
            f"{qrels_path}: {len(unknown)} of {len(judgments)} judgments point at ids that do not exist ({examples}"
            f"{'; ...' if len(unknown) > 3 else ''}). Fix the ids, or pass --skip_unknown_ids to leave those judgments out."
        )
    if unknown:
        logger.warning("%s: left out %d judgments with unknown query or document ids", qrels_path, len(unknown))
    qrels: dict[str, dict[str, int]] = {}
    for _, query_id, document_id, grade in judgments:
        if query_id in all_queries and document_id in corpus:
            qrels.setdefault(query_id, {})[document_id] = grade
    judged_queries = len(qrels)
    qrels = {query_id: judged for query_id, judged in qrels.items() if any(grade > 0 for grade in judged.values())}
    if len(qrels) < judged_queries:
        logger.info("%s: left out %d queries without a relevant document", qrels_path, judged_queries - len(qrels))
    if not qrels:
        raise InputError(
            f"--split {split}: {qrels_path} judges no query as having a relevant document (relevance > 0) among the "
            "queries and documents that exist, so there is nothing to evaluate. Choose another split "
            f"({', '.join(available_splits(data_dir))})."
        )
    queries = {query_id: all_queries[query_id] for query_id in qrels}
    return Collection(name=f"{Path(data_dir).name}/{split}", corpus=corpus, queries=queries, qrels=qrels)
