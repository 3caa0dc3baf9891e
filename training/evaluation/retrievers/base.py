"""What every retriever does: index a corpus once, search queries for their top k documents, and time both."""

import time
from collections.abc import Mapping, Sequence

import numpy as np

from ...data.fingerprint import corpus_fingerprints
from ...data.packed_corpus import PackedCorpus

Run = dict[str, dict[str, float]]  # query id -> {document id: score}


def run_from_top_k(
    query_ids: list[str], document_ids: list[str], indices: np.ndarray, scores: np.ndarray, positive_only: bool = False
) -> Run:
    """A run from per-query arrays of document rows and their scores; rows below 0 (faiss' "no result") are
    dropped, and with `positive_only` documents scoring 0 or less (no term in common with the query) too."""
    run = {}
    for query_id, rows, values in zip(query_ids, indices, scores):
        keep = (rows >= 0) & (values > 0) if positive_only else rows >= 0
        run[query_id] = {document_ids[row]: float(value) for row, value in zip(rows[keep], values[keep])}
    return run


class Retriever:
    """Base of all retrievers: `index` builds once per corpus (indexing the same corpus again does nothing, so
    a retriever shared by several hybrids is built once), `search` returns each query's top k documents.

    Subclasses implement `_build_index(corpus)` and `_search(queries, top_k)`; `stats()` reports the seconds
    spent building the index (encoding the corpus, or tokenising and indexing it for BM25) and in the last search
    (query encoding included), plus what a subclass adds.
    """

    def __init__(self, name: str):
        self.name = name
        self.settings: dict = {}  # how the retriever was configured, for the JSON report
        self.document_ids: Sequence[str] = []  # in index row order
        self._document_rows = None  # id -> row: a packed corpus' own, else made on first use
        self.corpus_fingerprint: str | None = None  # the indexed corpus' identity: its ids and texts
        self.texts_fingerprint: str | None = None  # its texts' alone, which its encodings are keyed on
        self._seconds = {"encode_seconds": 0.0, "search_seconds": 0.0}

    def index(self, corpus: Mapping[str, str]) -> None:
        fingerprints = corpus_fingerprints(corpus)
        if fingerprints.identity == self.corpus_fingerprint:
            return
        start = time.perf_counter()
        if isinstance(corpus, PackedCorpus):  # its own ids and index: mapped, not copied, for one opened from the cache
            self.document_ids, self._document_rows = corpus.ids, corpus.rows
        else:
            self.document_ids, self._document_rows = list(corpus), None
        self.corpus_fingerprint, self.texts_fingerprint = fingerprints  # subclasses key caches on the texts'
        try:
            self._build_index(corpus)
        except BaseException:
            self.corpus_fingerprint = None
            raise
        self._seconds["encode_seconds"] = time.perf_counter() - start

    def document_rows(self, document_ids: list[str]) -> np.ndarray:
        """The index rows of these indexed documents."""
        if self._document_rows is None:
            self._document_rows = {document_id: row for row, document_id in enumerate(self.document_ids)}
        return np.array([self._document_rows[document_id] for document_id in document_ids], dtype=np.int64)

    def search(self, queries: dict[str, str], top_k: int) -> Run:
        if self.corpus_fingerprint is None:
            raise RuntimeError(f"{self.name}: index a corpus before searching it")
        start = time.perf_counter()
        run = self._search(queries, min(top_k, len(self.document_ids)))
        self._seconds["search_seconds"] = time.perf_counter() - start
        return run

    def stats(self) -> dict[str, float]:
        return dict(self._seconds)

    def _build_index(self, corpus: Mapping[str, str]) -> None:
        raise NotImplementedError

    def _search(self, queries: dict[str, str], top_k: int) -> Run:
        raise NotImplementedError
