"""The approximate (IVF) dense index mining may use at large N: exact where it searches every list, close to exact
where it searches a few, and documents' vectors read back from it exactly (a teacher's pair scores and the sparse
label scale read them)."""

import numpy as np
import pytest

from training.common.models import load_sentence_transformer
from training.data.collection import load_collection
from training.evaluation.retrievers import DenseRetriever
from training.evaluation.retrievers.faiss_index import DEFAULT_NPROBE, EXACT, IVF, build_index, ivf_lists


def unit(vectors: np.ndarray) -> np.ndarray:
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def as_stored(embeddings: np.ndarray) -> np.ndarray:
    return np.array(embeddings, dtype=np.float32)


@pytest.fixture(scope="module")
def clustered():
    """20,000 documents around 300 topics in 64 dimensions, and 500 queries near documents: embeddings have topics,
    which an inverted file's lists follow (uniform random vectors have none, and no IVF does well on them)."""
    rng = np.random.default_rng(0)
    topics = unit(rng.standard_normal((300, 64)))
    documents = unit(topics[rng.integers(0, len(topics), 20_000)] + 0.15 * rng.standard_normal((20_000, 64)))
    queries = unit(documents[rng.integers(0, len(documents), 500)] + 0.1 * rng.standard_normal((500, 64)))
    return documents, queries


def recall(approximate: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(e)) / len(e) for a, e in zip(approximate, exact)]))


def test_the_number_of_lists_follows_four_root_n_with_at_least_39_vectors_a_list():
    assert ivf_lists(1_000_000) == 4000
    assert ivf_lists(20_000) == 512  # 4·sqrt(N) would be 566 lists, some trained on fewer than 39 vectors
    assert ivf_lists(10) == 1


def test_ivf_searching_the_default_number_of_lists_finds_most_of_the_exact_top_10(clustered):
    documents, queries = clustered
    _, exact = build_index(documents, as_stored, EXACT).search(queries, 10)
    index = build_index(documents, as_stored, IVF)
    _, approximate = index.search(queries, 10)

    assert (index.nlist, index.nprobe) == (512, DEFAULT_NPROBE)
    assert recall(approximate, exact) >= 0.95  # 0.997 measured; one list a query (faiss' default nprobe) finds 0.61


def test_ivf_keeps_every_vector_whole(clustered):
    documents, _ = clustered
    index = build_index(documents, as_stored, IVF)
    rows = np.array([0, 19_999, 7, 7])
    np.testing.assert_array_equal(index.reconstruct_batch(rows), documents[rows])


def test_a_dense_retriever_on_an_ivf_index_searching_every_list_ranks_as_exact_search(tiny_seed_dir, scifact_slice):
    """Built to search one list a query, then told to search them all (as the scale benchmark measures recall at
    several `nprobe` on one index)."""
    collection = load_collection(str(scifact_slice), "test")
    model = load_sentence_transformer(str(tiny_seed_dir))
    lists = ivf_lists(len(collection.corpus))
    retrievers = {
        kind: DenseRetriever(model, kind, index_kind=kind, nprobe=1, show_progress_bar=False) for kind in (EXACT, IVF)
    }
    for retriever in retrievers.values():
        retriever.index(collection.corpus)
    with pytest.raises(ValueError, match="changes an IVF index once built"):
        retrievers[EXACT].search_lists(lists)
    retrievers[IVF].search_lists(lists)  # built to search one list a query; from now on every list, not trained again
    runs = {kind: retriever.search(collection.queries, 10) for kind, retriever in retrievers.items()}

    assert retrievers[IVF].settings["index"] == f"ivf (nlist {lists}, nprobe {lists})"
    for query_id, exact in runs[EXACT].items():
        approximate = runs[IVF][query_id]
        # The same ten scores; documents may trade places only where their scores tie to float precision.
        assert list(approximate.values()) == pytest.approx(list(exact.values()), abs=1e-5), query_id
        for document_id in approximate.keys() & exact.keys():
            assert approximate[document_id] == pytest.approx(exact[document_id], abs=1e-5)
    pairs = (list(collection.queries.values())[:3] * 2, list(collection.corpus)[-6:])
    np.testing.assert_allclose(retrievers[IVF].pair_scores(*pairs), retrievers[EXACT].pair_scores(*pairs), atol=1e-6)
