"""`--config_name` builds the model it names: `seed-small` has all-MiniLM-L6-v2's encoder, `seed-base`
BERT-base's, both with the paper's 3-layer span-2 weak decoder, and a config JSON file gets exactly its
fields. Checked on the parameters and on a forward pass (no training)."""

import json

import torch
from transformers import BertConfig, BertModel

from modeling_seed import SeedEncoderConfig, SeedEncoderForPreTraining
from training.pretraining.arguments import ModelArguments
from training.pretraining.model_source import resolve_model_source

ENCODER_SHAPE = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
    "max_position_embeddings", "type_vocab_size",
)


def built(config_name: str) -> SeedEncoderForPreTraining:
    return SeedEncoderForPreTraining(resolve_model_source(ModelArguments(config_name=config_name)).config).eval()


def forward_shapes(model: SeedEncoderForPreTraining, batch: int = 2, length: int = 12) -> dict:
    """Shapes of what one forward pass gives: every encoder layer, the [CLS] vector, MLM logits and the
    decoder's states, plus its loss."""
    input_ids = torch.randint(5, model.config.vocab_size, (batch, length))
    labels = torch.full_like(input_ids, -100)
    labels[:, 3] = input_ids[:, 3]
    with torch.no_grad():
        output = model(input_ids=input_ids, labels=labels, output_hidden_states=True)
        decoder = model.weak_decoder(output.pooler_output, input_ids)
    assert torch.isfinite(output.mlm_loss) and torch.isfinite(output.decoder_loss)
    return {
        "hidden_states": [tuple(states.shape) for states in output.hidden_states],
        "cls": tuple(output.pooler_output.shape),
        "mlm_logits": tuple(model.cls(output.hidden_states[-1]).shape),
        "decoder_states": tuple(decoder.last_hidden_state.shape),
    }


def expected_shapes(layers: int, hidden: int, vocab: int, batch: int = 2, length: int = 12) -> dict:
    return {
        "hidden_states": [(batch, length, hidden)] * (layers + 1),
        "cls": (batch, hidden),
        "mlm_logits": (batch, length, vocab),
        "decoder_states": (batch, length, hidden),
    }


def encoder_parameter_shapes(module) -> dict:
    return {name: tuple(tensor.shape) for name, tensor in module.state_dict().items() if not name.startswith("pooler.")}


def assert_paper_decoder(model: SeedEncoderForPreTraining) -> None:
    assert len(model.weak_decoder.layer) == 3
    assert (model.config.decoder_attention_span, model.config.decoder_loss_weight) == (2, 1.0)


def test_seed_small_is_all_minilm_l6_v2_shaped_with_the_papers_decoder(minilm_dir):
    model = built("seed-small")
    minilm = BertModel.from_pretrained(minilm_dir)

    assert {field: getattr(model.config, field) for field in ENCODER_SHAPE} == {
        field: getattr(minilm.config, field) for field in ENCODER_SHAPE
    }
    assert encoder_parameter_shapes(model.bert) == encoder_parameter_shapes(minilm)
    assert_paper_decoder(model)
    assert forward_shapes(model) == expected_shapes(layers=6, hidden=384, vocab=30522)


def test_seed_base_is_bert_base_shaped_with_the_papers_decoder():
    model = built("seed-base")
    bert_base = BertConfig()
    with torch.device("meta"):
        bert_base_parameters = encoder_parameter_shapes(BertModel(bert_base))

    assert {field: getattr(model.config, field) for field in ENCODER_SHAPE} == {
        field: getattr(bert_base, field) for field in ENCODER_SHAPE
    }
    assert encoder_parameter_shapes(model.bert) == bert_base_parameters
    assert_paper_decoder(model)
    assert forward_shapes(model) == expected_shapes(layers=12, hidden=768, vocab=30522)


def test_config_json_file_sets_exactly_the_fields_it_names(tmp_path):
    fields = {
        "vocab_size": 500, "hidden_size": 48, "num_hidden_layers": 3, "num_attention_heads": 3,
        "intermediate_size": 96, "decoder_num_layers": 1, "decoder_attention_span": 4,
    }
    (tmp_path / "config.json").write_text(json.dumps(fields))

    model = built(str(tmp_path / "config.json"))

    assert {field: getattr(model.config, field) for field in fields} == fields
    assert len(model.weak_decoder.layer) == 1
    assert model.weak_decoder.attention_span == 4
    assert model.config.max_position_embeddings == SeedEncoderConfig().max_position_embeddings
    assert forward_shapes(model) == expected_shapes(layers=3, hidden=48, vocab=500)

