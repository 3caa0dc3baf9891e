"""Sparse (SPLADE) retrieval: exact top k by sparse dot product over an inverted index (a term x document CSR matrix)."""

import numpy as np
from scipy import sparse
from sentence_transformers import SparseEncoder
from tqdm.auto import tqdm

from ...common.sparse_encoding import Task, encode_sparse
from ..embedding_cache import cached_embeddings, model_cache_file
from .base import Retriever, Run, run_from_top_k

# Scores are computed for a block of queries against the whole corpus at a time: at most this many floats.
SCORE_BLOCK_VALUES = 2**25
SPARSITY_STATS = ("query_active_dims", "document_active_dims", "flops")


def top_k_rows(scores: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the column indices of the `top_k` highest scores and those scores, best first."""
    candidates = np.argpartition(-scores, top_k - 1, axis=1)[:, :top_k]
    candidate_scores = np.take_along_axis(scores, candidates, axis=1)
    order = np.argsort(-candidate_scores, axis=1, kind="stable")
    return np.take_along_axis(candidates, order, axis=1), np.take_along_axis(candidate_scores, order, axis=1)


class SparseRetriever(Retriever):
    """Encodes documents and queries as the model's `encode_document` and `encode_query` do (with `encode_sparse`,
    which never builds their [batch, length, vocabulary] logits), keeps the corpus as posting lists
    (term x document CSR) and scores a block of queries at a time by sparse matrix product: only documents
    sharing a term with the query are touched, and no corpus x vocabulary dense matrix is ever built.

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
        self.settings = {"max_seq_length": model.max_seq_length}
        self.documents: sparse.csr_matrix | None = None  # the encoded corpus, document x term
        self._postings: sparse.csr_matrix | None = None  # term x document: the inverted index
        self._queries: sparse.csr_matrix | None = None  # of the last search

    def _vectors(self, task: Task, texts: list[str]) -> sparse.csr_matrix:
        """The "query" or "document" vectors of `texts`, one CSR row each."""
        return encode_sparse(self.model, texts, task, self.batch_size, self.show_progress_bar)

    def _build_index(self, corpus: dict[str, str]) -> None:
        self.documents, self.corpus_from_cache = cached_embeddings(
            model_cache_file(self.cache_dir, self.cache_key, self.model, self.corpus_fingerprint, suffix=".npz"),
            len(corpus),
            lambda: self._vectors("document", list(corpus.values())),
        )
        self._postings = self.documents.T.tocsr()

    def _search(self, queries: dict[str, str], top_k: int) -> Run:
        self._queries = self._vectors("query", list(queries.values()))
        indices, scores = self.top_k(self._queries, top_k)
        return run_from_top_k(list(queries), self.document_ids, indices, scores, positive_only=True)

    def pair_scores(self, queries: list[str], document_ids: list[str]) -> np.ndarray:
        """The model's scores of the (query text, indexed document id) pairs: each distinct query encoded once, each
        document's vector read from the index instead of being encoded again."""
        query_rows = {text: row for row, text in enumerate(dict.fromkeys(queries))}
        query_vectors = self._vectors("query", list(query_rows))[[query_rows[text] for text in queries]]
        document_rows = {document_id: row for row, document_id in enumerate(self.document_ids)}
        document_vectors = self.documents[[document_rows[document_id] for document_id in document_ids]]
        return np.asarray(query_vectors.multiply(document_vectors).sum(axis=1), dtype=np.float32).ravel()

    def top_k(self, queries: sparse.csr_matrix, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """Per query vector (a CSR row), the rows of the `top_k` best documents and their scores, best first."""
        block = max(1, SCORE_BLOCK_VALUES // len(self.document_ids))
        indices, scores = [], []
        starts = range(0, queries.shape[0], block)
        for start in tqdm(starts, desc="Searching", unit="block", disable=not self.show_progress_bar):
            block_scores = (queries[start : start + block] @ self._postings).toarray()
            block_indices, block_top = top_k_rows(block_scores, top_k)
            indices.append(block_indices)
            scores.append(block_top)
        return np.concatenate(indices), np.concatenate(scores)

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
