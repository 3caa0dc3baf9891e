"""SEED models as plain BERT (`modeling_seed.as_bert`): transformers' own `BertModel` and `BertForMaskedLM` with the
same weights compute what the SEED classes compute, and the package loads every SEED checkpoint that way, so what
it fine-tunes and publishes needs neither this package nor remote code."""

import pytest
import torch
from sentence_transformers import SentenceTransformer, SparseEncoder
from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
from sentence_transformers.sparse_encoder.modules import SpladePooling
from sentence_transformers.sparse_encoder.modules import Transformer as SparseTransformer
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertModel

from modeling_seed import SeedEncoderConfig, SeedEncoderForMaskedLM, SeedEncoderForPreTraining, SeedEncoderModel, as_bert
from modeling_seed.plain_bert import bert_config, is_pretraining_field
from training.common.models import load_sentence_transformer, load_sparse_encoder

TEXTS = ["a short query", "a longer passage about cells, proteins and the genes that encode them"]


@pytest.fixture(scope="module")
def batch(tiny_seed_dir):
    """Two texts of different lengths, so the shorter one is padded."""
    return AutoTokenizer.from_pretrained(tiny_seed_dir)(TEXTS, padding=True, return_tensors="pt")


def test_every_field_of_the_seed_encoder_but_pretrainings_is_a_bert_config_field():
    """What makes every SEED encoder expressible as BERT: a new encoder field (rotary positions, say) fails here."""
    encoder_fields = {name for name in SeedEncoderConfig.__annotations__ if not is_pretraining_field(name)}

    assert encoder_fields <= set(BertConfig.__annotations__)
    assert set(SeedEncoderConfig.__annotations__) - encoder_fields == {
        "decoder_num_layers", "decoder_attention_span", "decoder_loss_weight", "decoder_num_attention_heads",
        "decoder_intermediate_size", "decoder_start_token_id", "decoder_condition", "mlm_loss_weight",
    }


def test_bert_config_keeps_every_encoder_value_and_the_attention_backend(tiny_config):
    config = tiny_config(hidden_act="gelu_new", layer_norm_eps=1e-7, type_vocab_size=1, tie_word_embeddings=False)
    config._attn_implementation = "eager"
    bert = bert_config(config)

    assert bert.model_type == "bert" and not hasattr(bert, "decoder_num_layers")
    assert (bert.hidden_act, bert.layer_norm_eps, bert.type_vocab_size, bert.tie_word_embeddings) == ("gelu_new", 1e-7, 1, False)
    assert bert._attn_implementation == "eager"


def test_trained_seed_encoder_as_bert_model_gives_the_same_states_at_every_position(tiny_seed_dir, batch):
    seed = SeedEncoderModel.from_pretrained(tiny_seed_dir).eval()
    bert = as_bert(seed)
    with torch.no_grad():
        expected, converted = seed(**batch), bert(**batch)

    assert type(bert) is BertModel and not bert.training
    assert torch.allclose(converted.last_hidden_state, expected.last_hidden_state, atol=1e-6, rtol=0)
    # SEED trains no pooler: BERT's is the identity, so its output is tanh of the [CLS] vector, the same on every load.
    assert torch.allclose(converted.pooler_output, torch.tanh(expected.pooler_output), atol=1e-6, rtol=0)


@pytest.mark.parametrize("seed_class", [SeedEncoderForMaskedLM, SeedEncoderForPreTraining])
def test_trained_seed_masked_lm_as_bert_for_masked_lm_gives_the_same_logits(tiny_seed_dir, batch, seed_class):
    masked_lm = SeedEncoderForMaskedLM.from_pretrained(tiny_seed_dir).eval()
    bert = as_bert(seed_class.from_pretrained(tiny_seed_dir).eval())
    with torch.no_grad():
        expected, converted = masked_lm(**batch).logits, bert(**batch).logits

    assert type(bert) is BertForMaskedLM
    assert masked_lm.cls.predictions.bias.abs().max() > 1e-4  # trained: a head without its bias would differ
    assert torch.allclose(converted, expected, atol=1e-6, rtol=0)
    assert bert.cls.predictions.decoder.weight is bert.bert.embeddings.word_embeddings.weight  # still tied


def test_other_models_are_left_as_they_are(tiny_config):
    bert = BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64))

    assert as_bert(bert) is bert


def test_package_loads_a_seed_folder_as_a_bert_sentence_transformer_encoding_what_the_seed_classes_encode(tiny_seed_dir):
    transformer = Transformer(str(tiny_seed_dir))  # through the Auto classes: SeedEncoderModel
    seed_model = SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension(), "cls")])
    loaded = load_sentence_transformer(str(tiny_seed_dir))

    assert type(transformer.auto_model) is SeedEncoderModel and type(loaded[0].auto_model) is BertModel
    assert torch.allclose(loaded.encode(TEXTS, convert_to_tensor=True), seed_model.encode(TEXTS, convert_to_tensor=True),
                          atol=1e-6, rtol=0)


def test_package_loads_a_seed_folder_as_a_bert_splade_encoding_what_the_seed_classes_encode(tiny_seed_dir):
    transformer = SparseTransformer(str(tiny_seed_dir), transformer_task="fill-mask")
    seed_model = SparseEncoder(modules=[transformer, SpladePooling(pooling_strategy="max")])
    loaded = load_sparse_encoder(str(tiny_seed_dir))

    assert type(transformer.auto_model) is SeedEncoderForMaskedLM and type(loaded[0].auto_model) is BertForMaskedLM
    expected = seed_model.encode(TEXTS, convert_to_tensor=True).to_dense()
    assert (expected != 0).sum() > 0
    assert torch.allclose(loaded.encode(TEXTS, convert_to_tensor=True).to_dense(), expected, atol=1e-6, rtol=0)
