"""Sparse (SPLADE) retrieval: exact top k by sparse dot product, the corpus scored one block of documents at a time.

Queries are searched QUERY_BATCH at a time, whatever the corpus' size: each batch passes over the corpus (a
document x term CSR matrix) in blocks of rows sized so that the batch's dense scores over a block are at most
SCORE_BLOCK_VALUES values, and keeps each query's running top k across the blocks.

Limits. Memory: the corpus' CSR matrix itself (about 8 bytes a non-zero: 10.6 GB at MS MARCO's 8.8M passages of
150 non-zeros; no transposed copy is kept), one block of scores (12 bytes a value while it is ranked: float32 scores
and int64 ranking keys, about 400 MB at 2**25 values) and each query's running top k (8 bytes an entry, twice over
while a block is merged in). Time: linear in documents x queries: the sparse product does the multiply-adds of the
terms each pair shares (as an inverted index does), and every block's dense scores are ranked in full.

Ties are broken by document row: of equal scores the lower row ranks first, however the corpus is cut into blocks
(the row is kept in 32 bits of a ranking key: at most 2**32 documents).
"""

from collections.abc import Mapping

import numpy as np
from scipy import sparse
from sentence_transformers import SparseEncoder
from tqdm.auto import tqdm

from ...common.sparse_encoding import Task, encode_sparse
from ...data.packed_corpus import text_chunks
from ..embedding_cache import cached_embeddings, model_cache_file
from .base import Retriever, Run, run_from_top_k

QUERY_BATCH = 1024  # queries searched together: one pass over the corpus each
SCORE_BLOCK_VALUES = 2**25  # dense scores of a batch of queries over a block of documents: at most this many
SPARSITY_STATS = ("query_active_dims", "document_active_dims", "flops")
_LOW_32_BITS = 0xFFFFFFFF


def ranking_keys(scores: np.ndarray, first_column: int = 0) -> np.ndarray:
    """One int64 key per float32 score whose order is the ranking's: the score in the high 32 bits (as sign and
    magnitude, so that the integers order as the floats do and -0.0 equals 0.0), the column, counted from
    `first_column` and inverted so that a lower column ranks higher, in the low 32 bits."""
    if scores.dtype != np.float32:
        raise TypeError(f"ranking_keys ranks float32 scores; got {scores.dtype}. Cast the vectors to float32.")
    bits = np.ascontiguousarray(scores).view(np.int32)
    if bits.min() < 0:  # a negative score or -0.0 (never from SPLADE's non-negative weights): negate the magnitude
        sign = bits >> 31
        bits = bits & 0x7FFFFFFF
        bits ^= sign
        bits -= sign
        del sign
    keys = bits.astype(np.int64)
    del bits
    keys <<= 32
    keys |= _LOW_32_BITS - np.arange(first_column, first_column + scores.shape[1], dtype=np.int64)
    return keys


def best_keys(keys: np.ndarray, top_k: int) -> np.ndarray:
    """Per row, the `top_k` largest keys (all of them if there are fewer), in no order. Reorders `keys` in place."""
    if keys.shape[1] <= top_k:
        return keys
    keys.partition(keys.shape[1] - top_k, axis=1)
    return keys[:, -top_k:].copy()


def ranked(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The columns and float32 scores of `ranking_keys`' keys, each row sorted best first."""
    keys = np.sort(keys, axis=1)[:, ::-1]
    columns = _LOW_32_BITS - (keys & _LOW_32_BITS)
    magnitudes = keys >> 32
    bits = np.where(magnitudes < 0, -magnitudes | 0x80000000, magnitudes).astype(np.uint32)
    return columns, bits.view(np.float32)


def top_k_rows(scores: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of float32 `scores`, the column indices of the `top_k` highest scores and those scores, best first;
    of equal scores the lower column first."""
    return ranked(best_keys(ranking_keys(scores), top_k))


def block_best_keys(
    block: sparse.csr_matrix, first_row: int, terms_by_query: sparse.csr_matrix, top_k: int
) -> np.ndarray:
    """Per query, the ranking keys of the `top_k` best documents of `block` (rows from `first_row` on); the
    block's dense scores and keys live only while this runs."""
    scores = (block @ terms_by_query).T.toarray(order="C")  # query x document, each query's scores contiguous
    return best_keys(ranking_keys(scores, first_column=first_row), top_k)


def sparse_top_k(
    queries: sparse.csr_matrix, documents: sparse.csr_matrix, top_k: int, show_progress_bar: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Per query (a CSR row), the rows of the `top_k` documents (CSR rows) of highest dot product and those
    scores, best first (of equal scores the lower row first): fewer columns where there are fewer documents. Both
    matrices hold float32 vectors over the same vocabulary, with sorted column indices (as `to_csr` makes them),
    so that each score sums the products of shared terms in the order of the terms."""
    queries_per_batch = max(1, min(QUERY_BATCH, queries.shape[0]))
    documents_per_block = max(1, SCORE_BLOCK_VALUES // queries_per_batch)
    query_starts = range(0, queries.shape[0], queries_per_batch)
    block_starts = range(0, documents.shape[0], documents_per_block)
    progress = tqdm(
        total=len(query_starts) * len(block_starts), desc="Searching", unit="block", disable=not show_progress_bar
    )
    indices, scores = [], []
    for query_start in query_starts:
        terms_by_query = queries[query_start : query_start + queries_per_batch].T.tocsr()
        best = np.empty((terms_by_query.shape[1], 0), dtype=np.int64)
        for block_start in block_starts:
            block = documents[block_start : block_start + documents_per_block]
            block_best = block_best_keys(block, block_start, terms_by_query, top_k)
            best = best_keys(np.concatenate([best, block_best], axis=1), top_k)
            progress.update()
        batch_indices, batch_scores = ranked(best)
        indices.append(batch_indices)
        scores.append(batch_scores)
    progress.close()
    return np.concatenate(indices), np.concatenate(scores)


class SparseRetriever(Retriever):
    """Encodes documents and queries as the model's `encode_document` and `encode_query` do (with `encode_sparse`,
    which never builds their [batch, length, vocabulary] logits), keeps the corpus as one document x term CSR
    matrix and searches it with `sparse_top_k`: a batch of queries against a block of documents at a time, by
    sparse matrix product (only the terms a query and a document share are multiplied), never a corpus x
    vocabulary dense matrix, nor scores over the whole corpus.

    `stats()` adds the average number of active (non-zero) dimensions of queries and documents, and FLOPS as
    the SPLADE papers define it (Formal et al. 2021, after Paria et al. 2020): the expected number of
    multiplications to score one query against one document, sum over the vocabulary of p_q(j) * p_d(j), where
    p_q(j) and p_d(j) are the fractions of queries and of documents in which term j is active.

    With `cache_dir` and `cache_key` (an identity of the model's weights), the encoded corpus is read from and
    written to `cache_dir` as a CSR matrix, keyed as DenseRetriever keys its embeddings.
    """

    def __init__(
        self,
        model: SparseEncoder,
        name: str,
        batch_size: int = 32,
        show_progress_bar: bool = True,
        cache_dir: str | None = None,
        cache_key: str | None = None,
    ):
        super().__init__(name)
        self.model = model
        self.batch_size = batch_size
        self.show_progress_bar = show_progress_bar
        self.cache_dir = cache_dir
        self.cache_key = cache_key
        self.corpus_from_cache = False
        self.cache_file = None  # where the corpus' encoding is kept, once indexed with a cache
        self.settings = {"max_seq_length": model.max_seq_length}
        self.documents: sparse.csr_matrix | None = None  # the encoded corpus, document x term
        self._queries: sparse.csr_matrix | None = None  # of the last search

    def _vectors(self, task: Task, texts: list[str]) -> sparse.csr_matrix:
        """The "query" or "document" vectors of `texts`, one CSR row each."""
        return encode_sparse(self.model, texts, task, self.batch_size, self.show_progress_bar)

    def _build_index(self, corpus: Mapping[str, str]) -> None:
        self.cache_file = model_cache_file(
            self.cache_dir, self.cache_key, self.model, self.texts_fingerprint, suffix=".npz"
        )
        self.documents, self.corpus_from_cache = cached_embeddings(
            self.cache_file,
            len(corpus),
            lambda: sparse.vstack([self._vectors("document", texts) for texts in text_chunks(corpus)], format="csr"),
        )
        self.documents.sort_indices()

    def _search(self, queries: dict[str, str], top_k: int) -> Run:
        self._queries = self._vectors("query", list(queries.values()))
        indices, scores = self.top_k(self._queries, top_k)
        return run_from_top_k(list(queries), self.document_ids, indices, scores, positive_only=True)

    def pair_scores(self, queries: list[str], document_ids: list[str]) -> np.ndarray:
        """The model's scores of the (query text, indexed document id) pairs: each distinct query encoded once, each
        document's vector read from the index instead of being encoded again."""
        query_rows = {text: row for row, text in enumerate(dict.fromkeys(queries))}
        query_vectors = self._vectors("query", list(query_rows))[[query_rows[text] for text in queries]]
        document_vectors = self.documents[self.document_rows(document_ids)]
        return np.asarray(query_vectors.multiply(document_vectors).sum(axis=1), dtype=np.float32).ravel()

    def top_k(self, queries: sparse.csr_matrix, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """Per query vector (a CSR row), the rows of the `top_k` best documents and their scores, best first."""
        queries.sort_indices()
        return sparse_top_k(queries, self.documents, top_k, self.show_progress_bar)

    def stats(self) -> dict[str, float]:
        stats = {**super().stats(), "corpus_from_cache": float(self.corpus_from_cache)}
        if self.documents is not None:
            stats["document_active_dims"] = float(self.documents.getnnz(axis=1).mean())
        if self._queries is not None and self.documents is not None:
            stats["query_active_dims"] = float(self._queries.getnnz(axis=1).mean())
            query_share = self._queries.getnnz(axis=0) / self._queries.shape[0]
            document_share = self.documents.getnnz(axis=0) / self.documents.shape[0]
            stats["flops"] = float(query_share @ document_share)
        return stats
