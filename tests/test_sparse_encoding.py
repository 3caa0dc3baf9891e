"""SPLADE encoding without the [batch, length, vocabulary] logits (`training.common.sparse_encoding`) gives the
vectors of sentence-transformers' own `encode_query` / `encode_document` (Transformer(fill-mask) + SpladePooling):
values within 1e-4 in fp32 and the same active dimensions."""

import pytest
import torch
from sentence_transformers.sparse_encoder.modules import SpladePooling

from evaluation_helpers import read_jsonl
from training.common.models import load_sparse_encoder
from training.common.sparse_encoding import (
    TOKEN_TILE,
    VOCABULARY_TILE,
    activate,
    encode_sparse,
    max_token_logits,
    runs_fast,
    to_csr,
)

TOLERANCE = 1e-4


def assert_same_vectors(ours, theirs):
    assert ours.shape == theirs.shape
    assert abs(ours - theirs).max() <= TOLERANCE
    assert ((ours != 0) != (theirs != 0)).nnz == 0, "active dimensions differ"


def library_vectors(model, texts, task, batch_size):
    encode = model.encode_query if task == "query" else model.encode_document
    return to_csr(encode(texts, batch_size=batch_size, convert_to_sparse_tensor=True, save_to_cpu=True))


@pytest.fixture(scope="module")
def abstracts(scifact_slice):
    """40 SciFact abstracts of every length, most longer than the 64 tokens the models keep here."""
    documents = read_jsonl(scifact_slice / "corpus.jsonl")[:40]
    return [f"{document['title']} {document['text']}" for document in documents]


@pytest.fixture(scope="module")
def splade_tiny(splade_tiny_dir):
    return load_sparse_encoder(str(splade_tiny_dir), max_seq_length=64)


def test_pooling_equals_splade_pooling_on_padding_an_all_padding_tail_and_a_text_without_tokens():
    """Token states where padding would win if it were not left out: 150 positions, none attended past 70 (more than
    a token tile of padding for every text), one text of one token, one with none, a vocabulary of 2.5 tiles."""
    generator = torch.Generator().manual_seed(0)
    lengths = [70, 33, 1, 0, 64]
    states = torch.randn(len(lengths), 150, 16, generator=generator)
    attention_mask = (torch.arange(150) < torch.tensor(lengths)[:, None]).long()
    states[attention_mask == 0] *= 10  # padded positions' logits are the largest: they win unless left out
    weight = torch.randn(VOCABULARY_TILE * 5 // 2, 16, generator=generator)
    bias = torch.randn(weight.shape[0], generator=generator)
    assert 150 - max(lengths) > TOKEN_TILE

    pooling = SpladePooling(pooling_strategy="max").eval()
    expected = pooling({"token_embeddings": states @ weight.T + bias, "attention_mask": attention_mask})["sentence_embedding"]
    ours = activate(max_token_logits(states, attention_mask, weight, bias), "relu")

    assert (expected[3] == 0).all()
    assert (ours[3] == 0).all()
    assert torch.allclose(ours, expected, atol=TOLERANCE, rtol=0)
    assert torch.equal(ours != 0, expected != 0)


@pytest.fixture(params=[1, 3], ids=["1-thread", "3-threads"])
def torch_threads(request):
    """With N torch threads the texts of a batch are shared out among N workers: every text must still be pooled
    once, by its own worker, and the caller's thread count must come back as it was."""
    threads = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    assert torch.get_num_threads() == request.param
    torch.set_num_threads(threads)


def test_splade_tiny_documents_and_queries_equal_sentence_transformers(splade_tiny, abstracts, torch_threads):
    """Batches of 7 texts of mixed lengths (padded), abstracts cut at 64 tokens, a last batch of 5, queries."""
    queries = ["What drives tumour growth in mice?", "0-dimensional biomaterials show inductive properties.", "a"]
    assert runs_fast(splade_tiny)

    assert_same_vectors(encode_sparse(splade_tiny, abstracts, "document", batch_size=7),
                        library_vectors(splade_tiny, abstracts, "document", batch_size=7))
    assert_same_vectors(encode_sparse(splade_tiny, queries, "query", batch_size=2),
                        library_vectors(splade_tiny, queries, "query", batch_size=2))
    assert encode_sparse(splade_tiny, abstracts, "document").getnnz(axis=1).min() > 0


def test_a_batch_of_one_and_no_texts(splade_tiny, abstracts):
    assert_same_vectors(encode_sparse(splade_tiny, abstracts[:1], "document"),
                        library_vectors(splade_tiny, abstracts[:1], "document", batch_size=1))
    assert encode_sparse(splade_tiny, [], "query").shape == (0, 30522)


def test_prompts_and_max_active_dims_are_applied_as_sentence_transformers_applies_them(splade_tiny_dir, abstracts):
    model = load_sparse_encoder(str(splade_tiny_dir), max_seq_length=64)
    model.prompts = {"query": "query: ", "passage": "passage: "}
    model.max_active_dims = 20
    queries = ["What drives tumour growth in mice?", "Is vitamin D linked to bone density?"]
    assert runs_fast(model)

    documents = encode_sparse(model, abstracts[:9], "document", batch_size=4)
    prompted_queries = encode_sparse(model, queries, "query")
    assert_same_vectors(documents, library_vectors(model, abstracts[:9], "document", batch_size=4))
    assert_same_vectors(prompted_queries, library_vectors(model, queries, "query", batch_size=32))
    assert documents.getnnz(axis=1).max() == 20
    model.prompts = {}
    assert abs(encode_sparse(model, queries, "query") - prompted_queries).max() > 0.1, "the prompt was not read"


def test_a_seed_pretraining_folder_encodes_as_sentence_transformers_encodes_it(tiny_seed_dir, abstracts):
    model = load_sparse_encoder(str(tiny_seed_dir), max_seq_length=48)
    assert runs_fast(model)
    assert_same_vectors(encode_sparse(model, abstracts, "document", batch_size=8),
                        library_vectors(model, abstracts, "document", batch_size=8))
