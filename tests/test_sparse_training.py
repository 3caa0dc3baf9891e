"""SPLADE training without the [batch, length, vocabulary] logits (`tiled_splade_training`, `TiledSpladeMax`) computes
what autograd through sentence-transformers' `SpladePooling` computes: the same vectors, and the same gradients for the
token states, the vocabulary projection (tied to the word embeddings in BERT) and its bias."""

import pytest
import torch
from sentence_transformers.sparse_encoder.modules import SpladePooling

from evaluation_helpers import read_jsonl
from training.common.models import load_sparse_encoder
from training.common.sparse_encoding import TOKEN_TILE, TiledSpladeMax, activate, encode_sparse, tiled_splade_training

TOLERANCE = 1e-4


def test_gradients_equal_autograd_through_splade_pooling_on_padding_long_texts_and_a_text_without_tokens():
    """200 positions: texts spanning three token tiles (so a max's token must be found past the first tile), padding
    whose logits would win if it were not left out, one text of one token and one with none."""
    generator = torch.Generator().manual_seed(0)
    lengths = [190, 140, 1, 0, 70]
    states = torch.randn(len(lengths), 200, 16, generator=generator)
    attention_mask = (torch.arange(200) < torch.tensor(lengths)[:, None]).long()
    states[attention_mask == 0] *= 10
    weight = torch.randn(3000, 16, generator=generator)
    bias = torch.randn(weight.shape[0], generator=generator)
    upstream = torch.randn(len(lengths), weight.shape[0], generator=generator)  # d loss / d vectors
    assert max(lengths) > 2 * TOKEN_TILE

    def vectors_and_gradients(pool):
        inputs = [tensor.clone().requires_grad_() for tensor in (states, weight, bias)]
        vectors = pool(*inputs)
        (vectors * upstream).sum().backward()
        return vectors.detach(), [tensor.grad for tensor in inputs]

    library_pooling = SpladePooling(pooling_strategy="max").train()
    expected, expected_gradients = vectors_and_gradients(
        lambda s, w, b: library_pooling({"token_embeddings": s @ w.T + b, "attention_mask": attention_mask})["sentence_embedding"]
    )
    ours, our_gradients = vectors_and_gradients(lambda s, w, b: activate(TiledSpladeMax.apply(s, attention_mask, w, b), "relu"))

    assert torch.allclose(ours, expected, atol=TOLERANCE, rtol=0)
    assert torch.equal(ours != 0, expected != 0)
    for name, mine, theirs in zip(["token states", "projection weight", "projection bias"], our_gradients, expected_gradients):
        assert theirs.abs().max() > 0
        assert torch.allclose(mine, theirs, atol=TOLERANCE, rtol=1e-4), f"{name}: gradients differ"
    assert (our_gradients[0][attention_mask == 0] == 0).all(), "padding received a gradient"


@pytest.fixture(scope="module")
def long_abstracts(scifact_slice):
    """SciFact abstracts, most longer than the 128 tokens kept, and one text of two words."""
    documents = read_jsonl(scifact_slice / "corpus.jsonl")[:12]
    return [f"{document['title']} {document['text']}" for document in documents] + ["hypoxia tolerance"]


def splade_tiny_step(model, texts):
    """The vectors of one forward pass and every parameter's gradient of a loss on them."""
    model.zero_grad()
    vectors = model(model.preprocess(texts))["sentence_embedding"]
    (vectors * torch.linspace(-1, 1, vectors.shape[1])).sum().backward()
    return vectors.detach(), {name: parameter.grad.clone() for name, parameter in model.named_parameters() if parameter.grad is not None}


def test_a_splade_tiny_training_step_has_sentence_transformers_vectors_and_gradients(splade_tiny_dir, long_abstracts):
    model = load_sparse_encoder(str(splade_tiny_dir), max_seq_length=128)
    model.eval()  # no dropout, so that both passes run the same network ...
    model[1].train()  # ... and SpladePooling without the in-place operations it uses in evaluation

    expected, expected_gradients = splade_tiny_step(model, long_abstracts)
    with tiled_splade_training(model):
        ours, our_gradients = splade_tiny_step(model, long_abstracts)

    assert torch.allclose(ours, expected, atol=TOLERANCE, rtol=0)
    assert torch.equal(ours != 0, expected != 0)
    assert our_gradients.keys() == expected_gradients.keys()
    # Attention key biases get no gradient but rounding (softmax ignores a constant per query): leave them out.
    compared = {name: gradient for name, gradient in expected_gradients.items() if gradient.abs().max() > 1e-3}
    assert any("word_embeddings" in name for name in compared), "the projection's (tied) weight is compared"
    for name, gradient in compared.items():
        assert (our_gradients[name] - gradient).abs().max() <= 1e-4 * gradient.abs().max(), f"{name}: gradients differ"


def test_an_evaluation_inside_training_keeps_the_tiled_pooling_and_leaving_restores_the_model(splade_tiny_dir, long_abstracts):
    model = load_sparse_encoder(str(splade_tiny_dir), max_seq_length=128)
    pooling, projection = model[1], model[0].auto_model.get_output_embeddings()
    expected = model.encode_document(long_abstracts, convert_to_tensor=True, convert_to_sparse_tensor=False)

    with tiled_splade_training(model):
        encode_sparse(model, long_abstracts, "document")  # what the trainer's evaluator runs between steps
        during = model.encode_document(long_abstracts, convert_to_tensor=True, convert_to_sparse_tensor=False)

    assert torch.allclose(during, expected, atol=TOLERANCE, rtol=0)
    assert "forward" not in pooling.__dict__ and "forward" not in projection.__dict__
    assert model[0](model.preprocess(long_abstracts[:1]))["token_embeddings"].shape[-1] == projection.out_features
