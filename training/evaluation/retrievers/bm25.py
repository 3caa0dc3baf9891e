"""BM25 over bm25s: scikit-learn-style tokens (lower-cased words of 2+ characters), optional stopwords and stemming."""

import importlib.util
import itertools
import logging
from collections.abc import Mapping
from types import SimpleNamespace

import bm25s
import numpy as np
import Stemmer

from ...common.errors import InputError
from ...data.packed_corpus import text_chunks
from .base import Retriever, Run, run_from_top_k
from .bm25_index import DocumentTermIds, TermIdsBM25

logger = logging.getLogger(__name__)

# Query-document pairs a search must span before bm25s' numba backend pays for compiling itself (~15 s a process):
# measured on 2,000 queries over 100k synthetic passages (2e8 pairs), numpy took 30.5 s on one thread and 16.7 s on
# two, numba 1.0 s once compiled, with equal scores (documents of equal score may come in another order).
NUMBA_MIN_PAIRS = 10**9

# Texts bm25s tokenises at once, fewer than other encoders take: it returns each text's ids as a Python list, about
# 36 bytes a token, so 100k synthetic passages at once held 263 MB beside a 54 MB index.
TOKENIZED_TEXTS = 2**15


class BM25Retriever(Retriever):
    """bm25s' BM25 (`method`: lucene, robertson, atire, bm25l or bm25+). `stopwords`: a language code bm25s knows
    (en, de, fr, ...) or None; `stemmer`: a PyStemmer algorithm (e.g. "english") or None."""

    def __init__(
        self,
        k1: float = 1.5,
        b: float = 0.75,
        method: str = "lucene",
        stopwords: str | None = "en",
        stemmer: str | None = None,
        name: str = "bm25",
        show_progress_bar: bool = True,
    ):
        super().__init__(name)
        self.settings = {"k1": k1, "b": b, "method": method, "stopwords": stopwords, "stemmer": stemmer}
        self.stopwords = stopwords
        self.stemmer = Stemmer.Stemmer(stemmer) if stemmer else None
        self.show_progress_bar = show_progress_bar
        self._bm25 = TermIdsBM25(k1=k1, b=b, method=method)

    def _tokens(self, texts: list[str]) -> list[list[str]]:
        return bm25s.tokenize(
            texts, stopwords=self.stopwords, stemmer=self.stemmer, return_ids=False, show_progress=self.show_progress_bar
        )

    def _term_ids(self, corpus: Mapping[str, str]) -> SimpleNamespace:
        """Every document's term ids and the vocabulary, as bm25s indexes them (its `ids` and `vocab`), tokenised a
        chunk of texts at a time: one vocabulary over the chunks, each chunk's ids mapped into it."""
        vocabulary: dict[str, int] = {}
        documents = DocumentTermIds()
        for texts in text_chunks(corpus, TOKENIZED_TEXTS):
            tokenized = bm25s.tokenize(
                texts, stopwords=self.stopwords, stemmer=self.stemmer, return_ids=True, show_progress=self.show_progress_bar
            )
            to_vocabulary = np.empty(max(tokenized.vocab.values(), default=-1) + 1, dtype=np.int32)
            for token, chunk_id in tokenized.vocab.items():
                to_vocabulary[chunk_id] = vocabulary.setdefault(token, len(vocabulary))
            chunk_lengths = np.fromiter(map(len, tokenized.ids), dtype=np.int64, count=len(tokenized.ids))
            chunk_ids = np.fromiter(itertools.chain.from_iterable(tokenized.ids), np.int32, int(chunk_lengths.sum()))
            documents.add(to_vocabulary[chunk_ids], chunk_lengths)
        return SimpleNamespace(ids=documents, vocab=vocabulary)

    def _build_index(self, corpus: Mapping[str, str]) -> None:
        term_ids = self._term_ids(corpus)
        if not term_ids.vocab:  # bm25s fails on an empty vocabulary with a bare ValueError
            raise InputError(
                f"{self.name}: none of the corpus' {len(corpus)} documents has a word BM25 indexes (words of 2+ "
                f"characters{', stopwords (' + self.stopwords + ') left out' if self.stopwords else ''}): there is "
                "nothing to search. Check that the corpus file holds the documents' text."
            )
        self._bm25.index(term_ids, show_progress=self.show_progress_bar)

    def _query_term_ids(self, query: str) -> list[int]:
        if self.corpus_fingerprint is None:
            raise RuntimeError(f"{self.name}: index a corpus before scoring it")
        tokens = bm25s.tokenize(
            [query], stopwords=self.stopwords, stemmer=self.stemmer, return_ids=False, show_progress=False
        )[0]
        return self._bm25.get_tokens_ids(tokens)  # a term the corpus never holds scores 0 everywhere: dropped

    def scores(self, query: str) -> np.ndarray:
        """The query's BM25 score of every indexed document, in corpus order."""
        term_ids = self._query_term_ids(query)
        if not term_ids:  # bm25s cannot score an empty query
            return np.zeros(len(self.document_ids), dtype=np.float32)
        return self._bm25.get_scores(term_ids)

    def pair_scores(self, query: str, rows: np.ndarray) -> np.ndarray:
        """The query's BM25 score of the indexed documents at `rows` (positions in corpus order), equal to `scores`
        at those rows, without a corpus-length vector: each query term's column of bm25s' precomputed term x document
        scores (CSC, document ids sorted) is searched for the rows, and a term repeated in the query counts again, as
        in bm25s. The cost grows with the terms' posting lists, not with the corpus."""
        rows = np.asarray(rows, dtype=np.int64)
        index = self._bm25.scores
        data, indices, indptr = index["data"], index["indices"], index["indptr"]
        total = np.zeros(len(rows), dtype=np.dtype(self._bm25.dtype))
        for term_id in self._query_term_ids(query):
            start, end = indptr[term_id], indptr[term_id + 1]
            if start == end:
                continue
            postings = indices[start:end]
            # `rows` in the postings' own integer type: searching with another would copy the whole posting list.
            found = np.minimum(np.searchsorted(postings, rows.astype(postings.dtype)), len(postings) - 1)
            total += np.where(postings[found] == rows, data[start:end][found], 0).astype(total.dtype)
        return total

    def _search(self, queries: dict[str, str], top_k: int) -> Run:
        """Queries left with no term (only stopwords or one-character words) match no document: they get an empty
        ranking and one log line for all of them, instead of bm25s' line per query."""
        tokens = dict(zip(queries, self._tokens(list(queries.values()))))
        searchable = [query_id for query_id, terms in tokens.items() if terms]
        if len(searchable) < len(queries):
            logger.info(
                "BM25: %d of %d queries have no term left after stopwords and one-character words are removed; "
                "they match no document.", len(queries) - len(searchable), len(queries),
            )
        run = {query_id: {} for query_id in queries}
        if searchable:
            self._bm25.backend = search_backend(len(searchable) * len(self.document_ids))
            indices, scores = self._bm25.retrieve(
                [tokens[query_id] for query_id in searchable], k=top_k, show_progress=self.show_progress_bar,
                n_threads=-1,  # every core: bm25s' numpy scoring releases the GIL, and mining waits for it
            )
            run.update(run_from_top_k(searchable, self.document_ids, indices, scores, positive_only=True))
        return run


def search_backend(pairs: int) -> str:
    """bm25s' backend for a search spanning `pairs` query-document pairs: numba for large searches where it is
    installed (ranx, a dependency, brings it), numpy otherwise."""
    if pairs >= NUMBA_MIN_PAIRS and importlib.util.find_spec("numba") is not None:
        return "numba"
    return "numpy"
