"""Published baselines on SciFact test reproduce: BM25 over the whole corpus, all-MiniLM-L6-v2 over a fixed subset.

Encoding all 5,183 abstracts with all-MiniLM-L6-v2 takes minutes on two CPU cores, so the dense figure is pinned
on a fixed subset: every document a test query judges plus the first OTHER_DOCUMENTS other documents by id. Its
value was measured once with this code; the full-corpus figure (0.645 nDCG@10, as published) is in the README,
measured with `training/evaluate.py`. The subset's embeddings are computed once per module and cached on disk,
and a second evaluation must read them instead of encoding the corpus again.
"""

import pytest

from training.common.models import load_sentence_transformer
from training.data.collection import Collection, load_collection
from training.evaluation.embedding_cache import weights_fingerprint
from training.evaluation.evaluate import evaluate_retriever
from training.evaluation.retrievers import BM25Retriever, DenseRetriever

OTHER_DOCUMENTS = 100
# all-MiniLM-L6-v2 as it ships (mean pooling, normalised, 256 tokens) on the subset (383 documents: 283 judged,
# 100 others), measured once; with so few distractors it scores well above its full-corpus 0.645.
MINILM_SUBSET_NDCG_AT_10 = 0.8576
MINILM_SUBSET_RECALL_AT_100 = 0.9967


@pytest.fixture(scope="module")
def scifact_test(shared_data_dir) -> Collection:
    return load_collection(str(shared_data_dir / "scifact"), "test")


@pytest.fixture(scope="module")
def subset(scifact_test) -> Collection:
    judged = {document for judged in scifact_test.qrels.values() for document in judged}
    others = sorted(document for document in scifact_test.corpus if document not in judged)[:OTHER_DOCUMENTS]
    corpus = {document: text for document, text in scifact_test.corpus.items() if document in judged or document in others}
    return Collection("scifact/test-subset", corpus, scifact_test.queries, scifact_test.qrels)


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return load_sentence_transformer(str(minilm_dir))


@pytest.fixture(scope="module")
def embedding_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("embedding-cache"))


@pytest.fixture(scope="module")
def first_evaluation(minilm, minilm_dir, subset, embedding_cache):
    """all-MiniLM-L6-v2 on the subset, encoding the corpus and writing its embeddings to the cache."""
    retriever = DenseRetriever(
        minilm, "minilm", cache_dir=embedding_cache, cache_key=weights_fingerprint(minilm), show_progress_bar=False
    )
    return evaluate_retriever(retriever, subset)


@pytest.mark.slow
def test_bm25_reproduces_the_bm25s_figure_for_scifact(scifact_test):
    result = evaluate_retriever(BM25Retriever(show_progress_bar=False), scifact_test)

    assert result.metrics["ndcg@10"] == pytest.approx(0.662, abs=0.01)


@pytest.mark.slow
def test_minilm_as_it_ships_scores_the_pinned_subset_figures(minilm, first_evaluation, subset):
    assert len(subset.corpus) == 383
    assert minilm.max_seq_length == 256 and minilm.similarity_fn_name == "cosine"
    assert first_evaluation.stats["corpus_from_cache"] == 0.0

    assert first_evaluation.metrics["ndcg@10"] == pytest.approx(MINILM_SUBSET_NDCG_AT_10, abs=1e-3)
    assert first_evaluation.metrics["recall@100"] == pytest.approx(MINILM_SUBSET_RECALL_AT_100, abs=1e-3)


def test_second_evaluation_reads_the_cached_corpus_embeddings_without_encoding(
    minilm, minilm_dir, subset, embedding_cache, first_evaluation, monkeypatch
):
    encoded_documents = []
    encode_document = minilm.encode_document

    def counting_encode_document(texts, **kwargs):
        encoded_documents.extend(texts)
        return encode_document(texts, **kwargs)

    monkeypatch.setattr(minilm, "encode_document", counting_encode_document)
    retriever = DenseRetriever(
        minilm, "minilm", cache_dir=embedding_cache, cache_key=weights_fingerprint(minilm), show_progress_bar=False
    )

    second = evaluate_retriever(retriever, subset)

    assert encoded_documents == []
    assert second.stats["corpus_from_cache"] == 1.0
    assert second.metrics == first_evaluation.metrics
