"""Sparse search in bounded memory: `sparse_top_k` scores a batch of queries against a block of documents at a
time and merges each query's running top k across the blocks.

Its top k equal brute force (the dense product Q @ D.T, then the best k of each row by score, ties to the lower
document row) however the corpus and the queries are cut into blocks, including top k larger than a block or than
the corpus; cutting the corpus differently changes no score by a bit; and the batch of queries and the memory a
search takes do not change with the number of documents.
"""

import tracemalloc

import numpy as np
import pytest
from scipy import sparse as scipy_sparse

from benchmarks.sparse_search import synthetic_vectors
from training.evaluation.retrievers import sparse
from training.evaluation.retrievers.sparse import sparse_top_k, top_k_rows


def random_vectors(rows: int, active: int, seed: int, integers: bool = False) -> scipy_sparse.csr_matrix:
    """`rows` random SPLADE-like vectors over BERT's vocabulary with about `active` non-zeros each; with
    `integers`, weights 1 to 3, so that every dot product is exact in float32 and many tie."""
    vectors = synthetic_vectors(rows, active, seed)
    if integers:
        vectors.data = np.ceil(vectors.data * 3)
    return vectors


def dense_scores(queries, documents, dtype=np.float32) -> np.ndarray:
    """Q @ D.T by numpy over dense vectors, cut to the terms some query has (the others add nothing)."""
    terms = np.unique(queries.indices)
    return queries[:, terms].toarray().astype(dtype) @ documents[:, terms].toarray().astype(dtype).T


def brute_force_top_k(queries, documents, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """The dense product of the vectors, and per query the `top_k` documents by score, ties to the lower row."""
    scores = dense_scores(queries, documents)
    document_rows = np.arange(scores.shape[1])
    order = np.array([np.lexsort((document_rows, -query_scores))[:top_k] for query_scores in scores])
    return order, np.take_along_axis(scores, order, axis=1)


@pytest.fixture(scope="module")
def tied_vectors():
    """2,000 documents of ~150 non-zeros and 50 queries of ~20 (weights 1 to 3) over BERT's vocabulary."""
    return random_vectors(50, 20, seed=1, integers=True), random_vectors(2000, 150, seed=2, integers=True)


def use_blocks(monkeypatch, queries_per_batch: int, documents_per_block: int) -> None:
    monkeypatch.setattr(sparse, "QUERY_BATCH", queries_per_batch)
    monkeypatch.setattr(sparse, "SCORE_BLOCK_VALUES", queries_per_batch * documents_per_block)


# (queries per batch, documents per block): one block; 4 batches (the last of 2 queries) x 50 blocks; 7 batches x
# 286 blocks of 7 documents (the last of 5).
BLOCKINGS = [(1024, 2**25 // 1024), (16, 40), (8, 7)]


@pytest.mark.parametrize("top_k", [1, 10, 300, 2000, 2500])
@pytest.mark.parametrize(("queries_per_batch", "documents_per_block"), BLOCKINGS)
def test_blocked_search_equals_brute_force_top_k_with_ties_to_the_lower_row(
    tied_vectors, queries_per_batch, documents_per_block, top_k, monkeypatch
):
    queries, documents = tied_vectors
    use_blocks(monkeypatch, queries_per_batch, documents_per_block)

    indices, scores = sparse_top_k(queries, documents, top_k)

    expected_indices, expected_scores = brute_force_top_k(queries, documents, top_k)
    assert scores.dtype == np.float32
    np.testing.assert_array_equal(scores, expected_scores)
    np.testing.assert_array_equal(indices, expected_indices)


def test_the_data_has_ties_within_and_at_the_edge_of_the_top_k(tied_vectors):
    queries, documents = tied_vectors
    scores = dense_scores(queries, documents)
    tenth = -np.sort(-scores, axis=1)[:, 9]
    at_the_edge = [(row == value).sum() > 1 and (row > value).sum() < 9 for row, value in zip(scores, tenth)]
    assert sum(at_the_edge) > 25  # a tie straddles rank 10 for most queries
    assert (np.count_nonzero(scores, axis=1) < 300).all()  # top 300 ends in documents sharing no term, scored 0


def test_identical_documents_rank_in_row_order_across_blocks(monkeypatch):
    use_blocks(monkeypatch, queries_per_batch=2, documents_per_block=3)
    document = random_vectors(1, 150, seed=3)
    documents = scipy_sparse.vstack([document] * 20, format="csr")
    queries = random_vectors(5, 2000, seed=4)

    indices, scores = sparse_top_k(queries, documents, 8)

    np.testing.assert_array_equal(indices, np.tile(np.arange(8), (5, 1)))
    np.testing.assert_array_equal(scores, np.repeat((queries @ document.T).toarray().astype(np.float32), 8, axis=1))


def test_cutting_the_corpus_into_blocks_changes_no_score_by_a_bit(monkeypatch):
    queries, documents = random_vectors(40, 20, seed=5), random_vectors(3000, 150, seed=6)
    whole_indices, whole_scores = sparse_top_k(queries, documents, 100)

    use_blocks(monkeypatch, queries_per_batch=16, documents_per_block=37)
    indices, scores = sparse_top_k(queries, documents, 100)

    np.testing.assert_array_equal(scores, whole_scores)
    np.testing.assert_array_equal(indices, whole_indices)
    exact = dense_scores(queries, documents, np.float64)
    np.testing.assert_allclose(scores, np.take_along_axis(exact, indices, axis=1), rtol=1e-6)
    found = -np.sort(-np.take_along_axis(exact, indices, axis=1), axis=1)
    np.testing.assert_allclose(found, -np.sort(-exact, axis=1)[:, :100], rtol=1e-6)  # the best 100, up to rounding


def test_top_k_rows_orders_by_score_then_column_negative_scores_and_signed_zeros_included():
    scores = np.array([[0.5, -1.0, 0.0, 0.5, -0.0, np.inf, -2.0, 0.5]], dtype=np.float32)

    indices, top = top_k_rows(scores, 6)

    np.testing.assert_array_equal(indices, [[5, 0, 3, 7, 2, 4]])
    np.testing.assert_array_equal(top, [[np.inf, 0.5, 0.5, 0.5, 0.0, 0.0]])


@pytest.mark.parametrize("documents", [2000, 20000])
def test_queries_are_searched_a_fixed_batch_at_a_time_whatever_the_corpus_size(documents, monkeypatch):
    monkeypatch.setattr(sparse, "QUERY_BATCH", 64)
    monkeypatch.setattr(sparse, "SCORE_BLOCK_VALUES", 64 * 500)
    shapes, ranking_keys = [], sparse.ranking_keys

    def spy(scores, *args, **kwargs):
        shapes.append(scores.shape)
        return ranking_keys(scores, *args, **kwargs)

    monkeypatch.setattr(sparse, "ranking_keys", spy)
    queries, corpus = random_vectors(150, 20, seed=7), random_vectors(documents, 150, seed=8)

    sparse_top_k(queries, corpus, 10)

    blocks = -(-documents // 500)
    assert shapes == [(64, 500)] * blocks * 2 + [(22, 500)] * blocks


def test_a_search_takes_the_same_memory_at_ten_times_the_documents_and_no_copy_of_the_corpus(monkeypatch):
    monkeypatch.setattr(sparse, "QUERY_BATCH", 256)
    monkeypatch.setattr(sparse, "SCORE_BLOCK_VALUES", 2**16)
    queries = random_vectors(256, 20, seed=9)
    peaks = {}
    for documents in (2000, 20000):
        corpus = random_vectors(documents, 150, seed=10)
        tracemalloc.start()
        sparse_top_k(queries, corpus, 10)
        peaks[documents] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()

    corpus_bytes = corpus.data.nbytes + corpus.indices.nbytes + corpus.indptr.nbytes
    assert peaks[20000] < 1.2 * peaks[2000], f"{peaks} bytes traced"
    assert peaks[20000] < corpus_bytes / 4, f"{peaks[20000]} bytes traced searching a {corpus_bytes}-byte corpus"
