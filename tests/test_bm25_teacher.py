"""The BM25 distillation teacher (`--teacher bm25`): it scores the (query, document) pairs it is given, with the
scores BM25 search gives the same documents, and its memory grows neither with the number of queries nor with the
corpus."""

import tracemalloc

import numpy as np
import pytest

from training.data.collection import load_collection
from training.evaluation.retrievers import BM25Retriever
from training.finetuning.teachers import BM25Teacher


@pytest.fixture(scope="module")
def train(scifact_slice):
    return load_collection(str(scifact_slice), "train")


def test_each_pair_scores_what_bm25_search_gives_that_document_for_that_query(train):
    """Pairs in mixed order, queries repeated, and a document outside the query's top 5 (scored, not dropped)."""
    search = BM25Retriever(show_progress_bar=False)
    search.index(train.corpus)
    queries = dict(list(train.queries.items())[:6])
    run = search.search(queries, top_k=len(train.corpus))
    pairs = []
    for query_id, scores in run.items():
        ranked = sorted(scores.items(), key=lambda item: -item[1])
        pairs += [(queries[query_id], document_id, score) for document_id, score in ranked[:4] + ranked[20:21]]
    order = np.random.default_rng(0).permutation(len(pairs))
    pairs = [pairs[position] for position in order]

    teacher = BM25Teacher(train.corpus)
    found = teacher.score([query for query, _, _ in pairs], [train.corpus[document_id] for _, document_id, _ in pairs])

    np.testing.assert_allclose(found, [score for _, _, score in pairs], rtol=1e-6)
    assert len({query for query, _, _ in pairs}) == 6 and (found > 0).all()


def test_the_index_is_built_by_the_process_that_scores_not_when_the_teacher_is_loaded(train):
    """Every process of a distributed run loads the teachers; only the main process scores."""
    teacher = BM25Teacher(train.corpus)
    assert not teacher.is_indexed

    teacher.score([next(iter(train.queries.values()))], [next(iter(train.corpus.values()))])

    assert teacher.is_indexed


def test_memory_does_not_grow_with_the_number_of_queries(train):
    """A corpus of 10,000 passages: one corpus-length score vector is 40 KB. Keeping one per distinct query would
    need 3.6 MB more for 100 queries than for 10."""
    texts = list(train.corpus.values())
    corpus = {f"d{number}": f"{texts[number % len(texts)]} variant {number}" for number in range(10_000)}
    teacher = BM25Teacher(corpus)
    teacher.index()  # before the measurements: what scoring holds is measured, not the index
    documents = list(corpus.values())
    all_queries = [f"{query} {number}" for number, query in enumerate(list(train.queries.values()) * 4)][:100]

    def peak_bytes(queries: list[str]) -> int:
        tracemalloc.start()
        teacher.score(queries, documents[: len(queries)])
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak

    few, many = peak_bytes(all_queries[:10]), peak_bytes(all_queries)

    assert many < few + 1_000_000, (few, many)


def test_a_pair_is_scored_without_a_corpus_length_vector(train):
    """The same 10 pairs over 5,000 and 20,000 passages: one corpus-length score vector is 20 KB, then 80 KB."""
    texts = list(train.corpus.values())
    queries = list(train.queries.values())[:10]

    def scored(passages: int) -> tuple[np.ndarray, np.ndarray, int]:
        corpus = {f"d{number}": f"{texts[number % len(texts)]} variant {number}" for number in range(passages)}
        teacher = BM25Teacher(corpus)
        documents = list(corpus.values())[:10]
        expected = np.array([teacher.index().scores(query)[row] for row, query in enumerate(queries)])
        tracemalloc.start()
        found = teacher.score(queries, documents)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return found, expected, peak

    (small, small_expected, small_peak), (large, large_expected, large_peak) = scored(5_000), scored(20_000)

    np.testing.assert_array_equal(small, small_expected)  # bit for bit the corpus-wide scores at those rows
    np.testing.assert_array_equal(large, large_expected)
    assert large_peak < small_peak + 30_000, (small_peak, large_peak)
