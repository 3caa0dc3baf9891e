"""SeedEncoderConfig: defaults are the paper's weak decoder, bad values fail at construction, and
the config survives a save/load."""

import json

import pytest
from huggingface_hub.errors import StrictDataclassClassValidationError, StrictDataclassFieldValidationError
from transformers import AutoConfig

from modeling_seed import SeedEncoderConfig
from modeling_seed.configuration_seed import AUTO_MAP


def fields(config: SeedEncoderConfig) -> dict:
    """Everything a config says about the model (not where it was loaded from)."""
    return {key: value for key, value in config.to_dict().items() if key != "_name_or_path"}


def test_default_config_is_bert_base_with_the_papers_weak_decoder():
    config = SeedEncoderConfig()

    assert config.model_type == "seed_encoder"
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (768, 12, 12)
    assert config.decoder_num_layers == 3
    assert config.decoder_attention_span == 2
    assert config.decoder_loss_weight == 1.0


def test_decoder_heads_and_ffn_default_to_the_encoders():
    config = SeedEncoderConfig(hidden_size=32, num_attention_heads=4, intermediate_size=48)

    assert config.decoder_num_attention_heads == 4
    assert config.decoder_intermediate_size == 48


def test_explicit_decoder_heads_and_ffn_are_kept():
    config = SeedEncoderConfig(
        hidden_size=32, num_attention_heads=4, intermediate_size=48,
        decoder_num_attention_heads=2, decoder_intermediate_size=16,
    )

    assert config.decoder_num_attention_heads == 2
    assert config.decoder_intermediate_size == 16


def test_decoder_start_token_defaults_to_the_pad_token():
    assert SeedEncoderConfig(vocab_size=100, pad_token_id=7).decoder_start_token_id == 7
    assert SeedEncoderConfig(vocab_size=100, pad_token_id=7, decoder_start_token_id=3).decoder_start_token_id == 3


def test_decoder_building_blocks_get_the_decoder_sizes(tiny_config):
    layer_config = tiny_config(decoder_num_layers=1, decoder_num_attention_heads=2, decoder_intermediate_size=16)\
        .decoder_layer_config()

    assert layer_config.is_decoder
    assert (layer_config.num_attention_heads, layer_config.intermediate_size) == (2, 16)
    assert layer_config.hidden_size == 32


@pytest.mark.parametrize("value", [1, None])
def test_span_one_and_full_causal_span_are_accepted(tiny_config, value):
    assert tiny_config(decoder_attention_span=value).decoder_attention_span == value


def test_zero_loss_weight_is_the_accepted_mlm_only_baseline(tiny_config):
    assert tiny_config(decoder_loss_weight=0).decoder_loss_weight == 0


@pytest.mark.parametrize(
    "overrides, message_parts",
    [
        ({"num_attention_heads": 5}, ["`hidden_size` (32) must be divisible by `num_attention_heads` (5)"]),
        ({"decoder_num_attention_heads": 3}, ["`hidden_size` (32)", "`decoder_num_attention_heads` (3)"]),
        ({"decoder_attention_span": 0}, ["`decoder_attention_span` must be >= 1", "got 0"]),
        ({"decoder_loss_weight": -0.5}, ["`decoder_loss_weight`", "must be >= 0", "got -0.5"]),
        ({"hidden_dropout_prob": 1.0}, ["`hidden_dropout_prob` must be in [0, 1), got 1.0"]),
        ({"attention_probs_dropout_prob": 1.5}, ["`attention_probs_dropout_prob` must be in [0, 1), got 1.5"]),
        ({"pad_token_id": 128}, ["`pad_token_id` (128) must be a vocabulary id in [0, 128)"]),
        ({"decoder_start_token_id": -1}, ["`decoder_start_token_id` (-1) must be a vocabulary id in [0, 128)"]),
        ({"decoder_num_layers": -1}, ["`decoder_num_layers` must be >= 0, got -1"]),
        ({"hidden_size": 0}, ["`hidden_size` must be at least 1, got 0"]),
    ],
    ids=lambda value: next(iter(value)) if isinstance(value, dict) else "",
)
def test_invalid_value_raises_at_construction_naming_the_field(tiny_config, overrides, message_parts):
    with pytest.raises(StrictDataclassClassValidationError) as raised:
        tiny_config(**overrides)

    for part in message_parts:
        assert part in str(raised.value)


def test_wrongly_typed_field_is_rejected(tiny_config):
    with pytest.raises(StrictDataclassFieldValidationError, match="decoder_attention_span"):
        tiny_config(decoder_attention_span="2")


def test_config_round_trips_through_save_and_load_including_a_full_causal_span(tiny_config, tmp_path):
    config = tiny_config(decoder_attention_span=None, decoder_loss_weight=0.5, decoder_start_token_id=3)
    config.save_pretrained(tmp_path)

    saved = json.loads((tmp_path / "config.json").read_text())
    loaded = SeedEncoderConfig.from_pretrained(tmp_path)
    auto_loaded = AutoConfig.from_pretrained(tmp_path)

    assert saved["decoder_attention_span"] is None
    assert loaded.decoder_attention_span is None
    assert (loaded.decoder_loss_weight, loaded.decoder_start_token_id) == (0.5, 3)
    assert fields(loaded) == fields(config)
    assert type(auto_loaded) is SeedEncoderConfig
    assert fields(auto_loaded) == fields(config)


def test_saved_config_carries_the_auto_map_for_remote_code_loading(tiny_config, tmp_path):
    tiny_config().save_pretrained(tmp_path)

    assert json.loads((tmp_path / "config.json").read_text())["auto_map"] == AUTO_MAP
