"""Each retriever returns exactly what brute force gives, on a slice of SciFact with a tiny SEED model.

Dense: cosine top k equals numpy over all document vectors. Sparse: top k equals the dense product of the SPLADE
vectors (without ever building it), and its statistics are those of the vectors. Both, whether the queries are
searched in one block or in several. Hybrid: reciprocal rank fusion
and normalised score sums follow their formulas over the members' runs.
"""

import functools
import logging
import tracemalloc

import bm25s
import faiss
import numpy as np
import pytest
import scipy.sparse as sparse_matrices
from tokenizers import normalizers

from training.common.errors import InputError
from training.common.models import load_sentence_transformer, load_sparse_encoder
from training.data import packed_corpus
from training.data.collection import load_collection
from training.evaluation.embedding_cache import model_cache_file, save_embeddings
from training.evaluation.retrievers import BM25Retriever, DenseRetriever, HybridRetriever, SparseRetriever, dense, sparse
from training.evaluation.retrievers import bm25, bm25_index, faiss_index
from training.data.fingerprint import corpus_fingerprints

TOP_K = 20


@pytest.fixture(scope="module")
def collection(scifact_slice):
    return load_collection(str(scifact_slice), "test")


@pytest.fixture(scope="module")
def dense_model(tiny_seed_dir):
    return load_sentence_transformer(str(tiny_seed_dir))


@pytest.fixture(scope="module")
def sparse_model(tiny_seed_dir):
    return load_sparse_encoder(str(tiny_seed_dir))


def assert_top_k(returned: dict[str, float], expected: dict[str, float], top_k: int):
    """`returned` holds documents with their `expected` scores, and those are the `top_k` highest (up to ties)."""
    best = sorted(expected.values(), reverse=True)[:top_k]
    assert sorted(returned.values(), reverse=True) == pytest.approx(best, rel=1e-4, abs=1e-5)
    assert returned == pytest.approx({document_id: expected[document_id] for document_id in returned}, rel=1e-4, abs=1e-5)


def assert_exact_top_k(run: dict, collection, scores: np.ndarray, top_k: int, positive_only: bool = False):
    """`run` is, per query, the `top_k` documents by brute-force `scores` (query x document); with
    `positive_only`, only those scoring above 0."""
    assert list(run) == list(collection.queries)
    for query_id, row in zip(run, scores):
        expected = {doc: float(score) for doc, score in zip(collection.corpus, row) if score > 0 or not positive_only}
        assert_top_k(run[query_id], expected, top_k)


def counting_encode_document(model, monkeypatch) -> list:
    """Texts passed to the real model's encode_document from now on."""
    seen, encode_document = [], model.encode_document

    def counting(texts, **kwargs):
        seen.extend(texts)
        return encode_document(texts, **kwargs)

    monkeypatch.setattr(model, "encode_document", counting)
    return seen


@pytest.mark.parametrize("queries_per_chunk", [dense.SEARCH_CHUNK, 7])
def test_dense_search_is_exact_cosine_top_k(dense_model, collection, queries_per_chunk, monkeypatch):
    monkeypatch.setattr(dense, "SEARCH_CHUNK", queries_per_chunk)  # 7: the 30 queries searched in 5 chunks
    retriever = DenseRetriever(dense_model, "tiny", show_progress_bar=False)
    retriever.index(collection.corpus)

    run = retriever.search(collection.queries, TOP_K)

    documents = dense_model.encode(list(collection.corpus.values()), normalize_embeddings=True)
    queries = dense_model.encode(list(collection.queries.values()), normalize_embeddings=True)
    assert dense_model.similarity_fn_name == "cosine"
    assert_exact_top_k(run, collection, queries @ documents.T, TOP_K)


def test_float16_embeddings_take_half_the_cache_and_are_searched_as_float32(dense_model, collection, tmp_path):
    """`--embedding_dtype float16`: the cached corpus is the float16 rounding of the model's embeddings, in a file of
    its own (a float32 evaluation of the same weights never reads it), and search is exact over those vectors."""
    retrievers = {
        dtype: DenseRetriever(
            dense_model, "tiny", cache_dir=str(tmp_path), cache_key="weights-1", show_progress_bar=False,
            embedding_dtype=dtype,
        )
        for dtype in ("float16", "float32")
    }
    for retriever in retrievers.values():
        retriever.index(collection.corpus)

    half, full = (retrievers[dtype].cache_file for dtype in ("float16", "float32"))
    assert not retrievers["float32"].corpus_from_cache  # not the float16 file
    assert np.load(half).dtype == np.float16
    assert half.stat().st_size < 0.55 * full.stat().st_size
    documents = np.load(full).astype(np.float16).astype(np.float32)
    documents /= np.linalg.norm(documents, axis=1, keepdims=True)
    queries = dense_model.encode(list(collection.queries.values()), normalize_embeddings=True)
    assert_exact_top_k(retrievers["float16"].search(collection.queries, TOP_K), collection, queries @ documents.T, TOP_K)


def test_dense_pair_scores_are_the_search_scores_of_those_documents(minilm_dir, collection):
    """What a teacher reads for mined pairs: queries repeated, documents in any order, the index's own vectors (a
    trained model, whose documents' scores differ; at 64 tokens, which is faster and changes nothing here)."""
    retriever = DenseRetriever(
        load_sentence_transformer(str(minilm_dir), max_seq_length=64), "minilm", show_progress_bar=False
    )
    retriever.index(collection.corpus)
    queries = dict(list(collection.queries.items())[:3])
    run = retriever.search(queries, 5)
    pairs = [(queries[query_id], document_id, score) for query_id, scores in run.items() for document_id, score in scores.items()]
    pairs.reverse()

    found = retriever.pair_scores([query for query, _, _ in pairs], [document_id for _, document_id, _ in pairs])

    np.testing.assert_allclose(found, [score for _, _, score in pairs], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("document_blocks", [None, 5])
def test_sparse_search_equals_the_dense_product_of_splade_vectors(sparse_model, collection, document_blocks, monkeypatch):
    if document_blocks is not None:  # the 30 queries' scores over the corpus in 5 blocks of documents
        documents_per_block = -(-len(collection.corpus) // document_blocks)
        monkeypatch.setattr(sparse, "SCORE_BLOCK_VALUES", len(collection.queries) * documents_per_block)
    retriever = SparseRetriever(sparse_model, "tiny-splade", show_progress_bar=False)
    retriever.index(collection.corpus)

    run = retriever.search(collection.queries, TOP_K)

    documents = sparse_model.encode(list(collection.corpus.values()), convert_to_sparse_tensor=False).numpy()
    queries = sparse_model.encode(list(collection.queries.values()), convert_to_sparse_tensor=False).numpy()
    assert_exact_top_k(run, collection, queries @ documents.T, TOP_K, positive_only=True)


def test_sparse_statistics_are_active_dimensions_and_splade_flops(sparse_model, collection):
    retriever = SparseRetriever(sparse_model, "tiny-splade", show_progress_bar=False)
    retriever.index(collection.corpus)
    retriever.search(collection.queries, TOP_K)

    stats = retriever.stats()

    documents = sparse_model.encode(list(collection.corpus.values()), convert_to_sparse_tensor=False).numpy() > 0
    queries = sparse_model.encode(list(collection.queries.values()), convert_to_sparse_tensor=False).numpy() > 0
    assert stats["document_active_dims"] == pytest.approx(documents.sum(axis=1).mean())
    assert stats["query_active_dims"] == pytest.approx(queries.sum(axis=1).mean())
    # FLOPS (Formal et al.): the expected number of multiplications per query-document pair.
    pairs_multiplied = (queries.astype(float) @ documents.T.astype(float)).mean()
    assert stats["flops"] == pytest.approx(pairs_multiplied)


def test_rrf_scores_each_document_by_the_sum_of_its_reciprocal_ranks(collection):
    # Two BM25 variants: their scores have no ties on this slice, so every document's rank is well defined
    # (the tiny model's cosines are near-equal, and tied ranks may fall either way).
    members = [
        BM25Retriever(show_progress_bar=False),
        BM25Retriever(k1=0.9, b=0.4, method="robertson", stemmer="english", name="bm25-stemmed", show_progress_bar=False),
    ]
    hybrid = HybridRetriever(members)
    hybrid.index(collection.corpus)

    run = hybrid.search(collection.queries, TOP_K)

    member_runs = [member.search(collection.queries, TOP_K) for member in members]
    for query_id in collection.queries:
        expected = {}
        for member_run in member_runs:
            ranked = sorted(member_run[query_id], key=lambda doc: -member_run[query_id][doc])
            for rank, document_id in enumerate(ranked, start=1):
                expected[document_id] = expected.get(document_id, 0.0) + 1 / (60 + rank)
        assert_top_k(run[query_id], expected, TOP_K)


def test_score_sum_adds_min_max_normalised_scores_with_the_weights(dense_model, collection):
    members = [BM25Retriever(show_progress_bar=False), DenseRetriever(dense_model, "tiny", show_progress_bar=False)]
    hybrid = HybridRetriever(members, method="score_sum", weights=[0.3, 0.7])
    hybrid.index(collection.corpus)

    run = hybrid.search(collection.queries, TOP_K)

    member_runs = [member.search(collection.queries, TOP_K) for member in members]
    query_id = next(iter(collection.queries))
    expected = {}
    for weight, member_run in zip([0.3, 0.7], member_runs):
        scores = member_run[query_id]
        low, high = min(scores.values()), max(scores.values())
        for document_id, score in scores.items():
            expected[document_id] = expected.get(document_id, 0.0) + weight * (score - low) / (high - low)
    assert_top_k(run[query_id], expected, TOP_K)


def test_a_corpus_indexed_a_chunk_of_texts_at_a_time_is_indexed_as_in_one_piece(
    dense_model, sparse_model, collection, monkeypatch
):
    """Every retriever takes a corpus' texts a chunk at a time (TEXT_CHUNK; BM25's tokeniser TOKENIZED_TEXTS), and a
    packed corpus decodes one chunk at a time: in chunks of 7 texts, the same vectors in the same rows and the same
    BM25 ranking as in one piece."""
    def indexed():
        retrievers = (
            DenseRetriever(dense_model, "tiny", show_progress_bar=False),
            SparseRetriever(sparse_model, "tiny-splade", show_progress_bar=False),
            BM25Retriever(show_progress_bar=False),
        )
        for retriever in retrievers:
            retriever.index(collection.corpus)
        return retrievers

    dense_whole, sparse_whole, bm25_whole = indexed()
    monkeypatch.setattr(packed_corpus, "TEXT_CHUNK", 7)
    monkeypatch.setattr(bm25, "TOKENIZED_TEXTS", 7)
    dense_chunked, sparse_chunked, bm25_chunked = indexed()

    np.testing.assert_allclose(dense_chunked.corpus_vectors(), dense_whole.corpus_vectors(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(sparse_chunked.documents.toarray(), sparse_whole.documents.toarray(), rtol=1e-4, atol=1e-5)
    assert bm25_chunked.search(collection.queries, TOP_K) == bm25_whole.search(collection.queries, TOP_K)


@pytest.mark.parametrize("method", ["lucene", "robertson", "bm25+"])
def test_bm25_index_built_from_term_ids_a_block_at_a_time_equals_bm25s_indexing_the_token_strings(collection, method, monkeypatch):
    """The index is built from each chunk's term ids mapped into one vocabulary (held as int32 arrays, not as lists
    of token strings), and its score matrix a block of documents at a time: every term's column holds the documents and
    the very scores of bm25s indexing the whole corpus' tokens, and so every query scores the corpus as bm25s does."""
    monkeypatch.setattr(bm25, "TOKENIZED_TEXTS", 7)
    monkeypatch.setattr(bm25_index, "BLOCK_TOKENS", 50)  # blocks of a few short documents, and long ones alone
    retriever = BM25Retriever(method=method, show_progress_bar=False)
    retriever.index(collection.corpus)
    reference = bm25s.BM25(method=method)
    tokenize = functools.partial(bm25s.tokenize, stopwords="en", return_ids=False, show_progress=False)
    reference.index(tokenize(list(collection.corpus.values())), show_progress=False)

    def columns(index: bm25s.BM25, terms: list[str]) -> sparse_matrices.csc_matrix:
        matrix = sparse_matrices.csc_matrix(
            (index.scores["data"], index.scores["indices"], index.scores["indptr"]),
            shape=(index.scores["num_docs"], len(index.scores["indptr"]) - 1),
        )
        return matrix[:, [index.vocab_dict[term] for term in terms]]

    terms = sorted(term for term in reference.vocab_dict if term)  # "" is bm25s' empty token, outside the matrix
    assert sorted(term for term in retriever._bm25.vocab_dict if term) == terms
    built, expected = columns(retriever._bm25, terms), columns(reference, terms)
    np.testing.assert_array_equal(built.indptr, expected.indptr)
    np.testing.assert_array_equal(built.indices, expected.indices)
    np.testing.assert_array_equal(built.data, expected.data)
    for query in collection.queries.values():
        term_ids = reference.get_tokens_ids(tokenize([query])[0])
        np.testing.assert_array_equal(retriever.scores(query), reference.get_scores(term_ids), err_msg=query)


@pytest.mark.slow  # numba compiles bm25s' search for ~15 s
def test_bm25_search_through_numba_for_large_searches_scores_as_numpy_does(collection, monkeypatch):
    """Above NUMBA_MIN_PAIRS query-document pairs the search runs on bm25s' numba backend: the same scores; documents
    of equal score may come in another order."""
    runs = {}
    for threshold in (10**18, 0):  # numpy, then numba for every search
        monkeypatch.setattr(bm25, "NUMBA_MIN_PAIRS", threshold)
        retriever = BM25Retriever(show_progress_bar=False)
        retriever.index(collection.corpus)
        runs[threshold] = retriever.search(collection.queries, TOP_K)
        assert retriever._bm25.backend == ("numpy" if threshold else "numba")

    numpy_run, numba_run = runs[10**18], runs[0]
    assert numpy_run.keys() == numba_run.keys()
    for query_id, expected in numpy_run.items():
        assert list(numba_run[query_id].values()) == pytest.approx(list(expected.values()), abs=1e-6), query_id
        for document_id in numba_run[query_id].keys() & expected.keys():
            assert numba_run[query_id][document_id] == pytest.approx(expected[document_id], abs=1e-6)


def test_bm25_leaves_out_documents_sharing_no_word_with_the_query(collection):
    retriever = BM25Retriever(show_progress_bar=False)
    retriever.index(collection.corpus)

    run = retriever.search({"nonsense": "zzzqx vvvpw", "one-word": "hypothalamus"}, TOP_K)

    assert run["nonsense"] == {}
    assert run["one-word"] and all("hypothalamus" in collection.corpus[doc].lower() for doc in run["one-word"])


def test_bm25_refuses_a_corpus_without_a_word_it_indexes():
    with pytest.raises(InputError, match=r"none of the corpus' 2 documents has a word BM25 indexes .*stopwords \(en\)"):
        BM25Retriever(show_progress_bar=False).index({"a": "the of", "b": "and a"})


def test_bm25_queries_of_stopwords_alone_match_nothing_and_are_counted_in_one_log_line(collection, caplog):
    retriever = BM25Retriever(show_progress_bar=False)
    retriever.index(collection.corpus)

    with caplog.at_level(logging.INFO):
        run = retriever.search({"stop-1": "of the and", "stop-2": "it is a", "word": "hypothalamus"}, TOP_K)
    messages = [record.getMessage() for record in caplog.records]

    assert run["stop-1"] == run["stop-2"] == {} != run["word"]
    assert [message for message in messages if "query" in message or "queries" in message] == [
        "BM25: 2 of 3 queries have no term left after stopwords and one-character words are removed; they match no "
        "document."
    ]
    assert not retriever.scores("of the").any()  # a teacher's scores of such a query: 0 for every document


def test_indexing_the_same_corpus_again_encodes_nothing(dense_model, collection, monkeypatch):
    retriever = DenseRetriever(dense_model, "tiny", show_progress_bar=False)
    retriever.index(collection.corpus)
    encoded = counting_encode_document(dense_model, monkeypatch)

    retriever.index(dict(collection.corpus))
    assert encoded == []
    smaller = dict(list(collection.corpus.items())[:10])
    retriever.index(smaller)
    assert encoded == list(smaller.values())


def test_embedding_cache_is_keyed_by_tokenizer_pooling_and_length_as_well_as_the_weights(
    tiny_seed_dir, collection, tmp_path, monkeypatch
):
    def evaluate_with_cache(model) -> list:
        encoded = counting_encode_document(model, monkeypatch)
        retriever = DenseRetriever(model, "tiny", cache_dir=str(tmp_path), cache_key="weights-1", show_progress_bar=False)
        retriever.index(collection.corpus)
        return encoded

    assert len(evaluate_with_cache(load_sentence_transformer(str(tiny_seed_dir)))) == len(collection.corpus)
    assert evaluate_with_cache(load_sentence_transformer(str(tiny_seed_dir))) == []
    assert evaluate_with_cache(load_sentence_transformer(str(tiny_seed_dir), pooling="mean")) != []
    assert evaluate_with_cache(load_sentence_transformer(str(tiny_seed_dir), max_seq_length=32)) != []
    cased = load_sentence_transformer(str(tiny_seed_dir))
    cased.tokenizer.backend_tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False)
    assert evaluate_with_cache(cased) != []


def test_the_same_texts_under_other_ids_share_one_cached_encoding_and_are_searched_under_their_own_ids(
    dense_model, collection, tmp_path, monkeypatch
):
    """A collection exported again with its documents renamed d0, d1, ... in row order: the encoding of the rows
    depends on their texts alone, so both read one cache entry; the same texts in another order are other rows."""
    renamed = {f"d{row}": text for row, text in enumerate(collection.corpus.values())}
    reordered = dict(reversed(list(renamed.items())))
    query = {"q": next(iter(collection.corpus.values()))}

    encoded = counting_encode_document(dense_model, monkeypatch)

    def indexed(corpus) -> tuple[DenseRetriever, list[str]]:
        already = len(encoded)
        retriever = DenseRetriever(dense_model, "tiny", cache_dir=str(tmp_path), cache_key="weights-1", show_progress_bar=False)
        retriever.index(corpus)
        return retriever, encoded[already:]

    original, encoded_first = indexed(collection.corpus)
    numbered, encoded_again = indexed(renamed)
    _, encoded_reordered = indexed(reordered)

    assert len(encoded_first) == len(collection.corpus) and encoded_again == [] and numbered.corpus_from_cache
    assert encoded_reordered == list(reordered.values())  # other rows: encoded afresh
    first_ids = {f"d{row}": document_id for row, document_id in enumerate(collection.corpus)}
    found, found_numbered = original.search(query, TOP_K)["q"], numbered.search(query, TOP_K)["q"]
    assert set(found_numbered) <= set(renamed)
    assert {first_ids[document_id]: score for document_id, score in found_numbered.items()} == pytest.approx(found)


def test_a_cached_corpus_is_searched_from_the_file_a_block_at_a_time(dense_model, tmp_path, monkeypatch):
    """At MS MARCO size the matrix alone is 13.5 GB (384 dimensions): the cached file is memory-mapped and exact
    search on the CPU reads it a block at a time, so that neither indexing nor searching holds a second whole copy of
    it in memory (faiss' flat index would)."""
    corpus = {f"d{number}": f"passage number {number}" for number in range(20_000)}
    embeddings = np.random.default_rng(0).standard_normal((len(corpus), dense_model.get_embedding_dimension()))
    embeddings = embeddings.astype(np.float32)
    save_embeddings(model_cache_file(str(tmp_path), "weights-1", dense_model, corpus_fingerprints(corpus).texts), embeddings)
    monkeypatch.setattr(faiss_index, "BLOCK_BYTES", 1000 * 4 * embeddings.shape[1])
    retriever = DenseRetriever(dense_model, "tiny", cache_dir=str(tmp_path), cache_key="weights-1", show_progress_bar=False)

    tracemalloc.start()
    retriever.index(corpus)
    retriever.search({"q": "passage number 7"}, TOP_K)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    assert retriever.corpus_from_cache
    assert peak < embeddings.nbytes / 4, f"{peak / 2**20:.1f} MiB traced searching a {embeddings.nbytes / 2**20:.1f} MiB matrix"
    normalised = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    np.testing.assert_allclose(retriever.corpus_vectors(), normalised, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("top_k", [5, 40, 300])
def test_blocked_exact_search_finds_what_faiss_flat_index_finds_over_the_whole_matrix(monkeypatch, top_k):
    """The CPU's exact search merges the top k of each block of 32 rows: the rows and scores of faiss' IndexFlatIP
    over all 250, also where k exceeds a block (40) and the corpus (300: the missing rows are -1)."""
    rng = np.random.default_rng(0)
    embeddings = rng.standard_normal((250, 16)).astype(np.float32)
    queries = rng.standard_normal((30, 16)).astype(np.float32)
    monkeypatch.setattr(faiss_index, "BLOCK_BYTES", 32 * 4 * 16)
    flat = faiss.IndexFlatIP(16)
    flat.add(embeddings)
    expected_scores, expected_rows = flat.search(queries, top_k)

    blocked = faiss_index.BlockedFlatIndex(embeddings, lambda stored: np.array(stored, dtype=np.float32))
    scores, rows = blocked.search(queries, top_k)

    np.testing.assert_array_equal(rows, expected_rows)
    found = expected_rows >= 0
    np.testing.assert_allclose(scores[found], expected_scores[found], rtol=1e-5)
    np.testing.assert_array_equal(blocked.reconstruct_n(0, 250), embeddings)
    np.testing.assert_array_equal(blocked.reconstruct_batch([249, 0, 31, 32]), embeddings[[249, 0, 31, 32]])
