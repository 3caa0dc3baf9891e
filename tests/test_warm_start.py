"""SeedEncoderForPreTraining.from_bert: a BERT checkpoint becomes the encoder, unchanged, with a fresh
weak decoder sharing the encoder's word embeddings; other encoder types, and checkpoints that would
leave an encoder weight at random, are refused."""

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertModel

from modeling_seed import SeedEncoderForPreTraining

TEXTS = ["SEED pre-trains a Siamese encoder with a weak decoder.", "A second, shorter sentence."]


@pytest.fixture(scope="module")
def warm_started(minilm_dir):
    return SeedEncoderForPreTraining.from_bert(str(minilm_dir)).eval()


def test_warm_started_encoder_reproduces_the_bert_checkpoints_hidden_states(warm_started, minilm_dir, tokenizer):
    bert = BertModel.from_pretrained(minilm_dir).eval()
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")

    with torch.no_grad():
        expected = bert(**batch).last_hidden_state
        got = warm_started.bert(**batch).last_hidden_state

    real = batch["attention_mask"].bool()
    torch.testing.assert_close(got[real], expected[real], rtol=0, atol=1e-5)


def test_warm_started_config_has_the_checkpoints_shape_and_seed_decoder_defaults(warm_started):
    config = warm_started.config

    assert config.model_type == "seed_encoder"
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (30522, 384, 6)
    assert (config.num_attention_heads, config.intermediate_size) == (12, 1536)
    assert (config.decoder_num_layers, config.decoder_attention_span, config.decoder_loss_weight) == (3, 2, 1.0)
    assert (config.decoder_num_attention_heads, config.decoder_intermediate_size) == (12, 1536)


def test_warm_start_overrides_set_seed_fields(minilm_dir):
    model = SeedEncoderForPreTraining.from_bert(str(minilm_dir), decoder_attention_span=8, decoder_num_layers=1)

    assert model.config.decoder_attention_span == 8
    assert model.weak_decoder.attention_span == 8
    assert len(model.weak_decoder.layer) == 1
    assert model.config.hidden_size == 384  # the checkpoint's shape is kept


def test_warm_started_decoder_is_fresh_and_reads_the_encoders_word_embeddings(warm_started):
    decoder = warm_started.weak_decoder
    word_embeddings = warm_started.bert.embeddings.word_embeddings.weight

    assert len(decoder.layer) == 3
    assert decoder.embeddings.word_embeddings.weight is word_embeddings
    assert warm_started.cls.predictions.decoder.weight is word_embeddings
    # Freshly initialised with initializer_range 0.02, not copied from anywhere.
    query = decoder.layer[0].attention.self.query.weight
    assert 0.015 < query.std().item() < 0.025
    assert torch.equal(decoder.layer[0].attention.self.query.bias, torch.zeros_like(query[:, 0]))


def test_warm_start_carries_over_the_mlm_head_when_the_checkpoint_has_one(tmp_path):
    bert_config = BertConfig(
        vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64,
    )
    bert = BertForMaskedLM(bert_config).eval()
    bert.save_pretrained(tmp_path)
    input_ids = torch.randint(5, 128, (2, 9))

    seed = SeedEncoderForPreTraining.from_bert(str(tmp_path), decoder_num_layers=1).eval()
    with torch.no_grad():
        expected_logits = bert(input_ids).logits
        got_logits = seed.cls(seed.bert(input_ids).last_hidden_state)

    torch.testing.assert_close(got_logits, expected_logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta", "camembert", "electra"])
def test_warm_start_from_another_encoder_type_is_refused_saying_only_bert_loads_unchanged(
    model_type, tmp_path, save_tiny_encoder
):
    save_tiny_encoder(model_type, tmp_path)

    with pytest.raises(ValueError) as refusal:
        SeedEncoderForPreTraining.from_bert(str(tmp_path))

    message = str(refusal.value)
    assert message.startswith(f"model_type {model_type!r} cannot warm-start a SEED-Encoder: only BERT checkpoints")
    assert "padding_idx + 1" in message and "Start from a BERT checkpoint" in message


def test_checkpoint_missing_an_encoder_weight_is_refused_naming_it(tmp_path, save_tiny_encoder):
    save_tiny_encoder("bert", tmp_path, without="encoder.layer.1.output.dense.weight")

    with pytest.raises(ValueError) as refusal:
        SeedEncoderForPreTraining.from_bert(str(tmp_path))

    assert str(refusal.value).startswith(
        f"{tmp_path}: 1 encoder weight(s) would start from random values instead of the checkpoint's: "
        "bert.encoder.layer.1.output.dense.weight (not in the checkpoint)."
    )


def test_checkpoint_of_another_shape_than_its_config_is_refused_naming_the_weights(tmp_path, save_tiny_encoder):
    save_tiny_encoder("bert", tmp_path)

    with pytest.raises(ValueError) as refusal:
        SeedEncoderForPreTraining.from_bert(str(tmp_path), intermediate_size=48)

    assert str(refusal.value).startswith(
        f"{tmp_path}: 6 encoder weight(s) would start from random values instead of the checkpoint's: "
        "bert.encoder.layer.0.intermediate.dense.bias ((64,) in the checkpoint, (48,) in the model); "
    )
