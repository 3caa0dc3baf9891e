"""SEED models as plain BERT: the same weights in transformers' own `BertModel` and `BertForMaskedLM`.

The SEED encoder is `BertEmbeddings` + `BertEncoder` under BERT's parameter names, and its MLM head is
`BertOnlyMLMHead`: only pretraining needs the weak decoder, and so only a pretraining folder needs this
package's code. A retriever made from a SEED checkpoint is saved as BERT (`model_type: bert`, no `auto_map`,
no code files), which the tools that serve embedding models load as it is, as RetroMAE and BGE are released.
"""

import torch
from transformers import BertConfig, BertForMaskedLM, BertModel

from .configuration_seed import SeedEncoderConfig
from .modeling_seed import SeedEncoderForMaskedLM, SeedEncoderForPreTraining, SeedEncoderModel

# Fields of pretraining alone: the decoder's and the MLM term's weight. Every other SeedEncoderConfig field is one of
# BertConfig's (a test holds the two classes to that), so any SEED encoder is expressible as BERT.
DECODER_FIELD_PREFIX = "decoder_"
PRETRAINING_LOSS_FIELDS = ("mlm_loss_weight",)


def is_pretraining_field(name: str) -> bool:
    return name.startswith(DECODER_FIELD_PREFIX) or name in PRETRAINING_LOSS_FIELDS


def bert_config(config: SeedEncoderConfig) -> BertConfig:
    """The BERT config of a SEED model's encoder (and MLM head): its encoder fields, without pretraining's."""
    encoder_fields = {
        name: getattr(config, name) for name in SeedEncoderConfig.__annotations__ if not is_pretraining_field(name)
    }
    return BertConfig(**encoder_fields, attn_implementation=config._attn_implementation, dtype=config.dtype)


def _like(converted: torch.nn.Module, original: torch.nn.Module) -> torch.nn.Module:
    parameter = next(original.parameters())
    return converted.to(device=parameter.device, dtype=parameter.dtype).train(original.training)


def as_bert_model(encoder: SeedEncoderModel) -> BertModel:
    """`BertModel` computing what `encoder` computes (same weights, same `last_hidden_state`).

    BERT has a tanh pooler that SEED never trains. It is set to the identity (bias 0), so `pooler_output` is
    tanh of the [CLS] vector instead of random numbers, and two conversions of the same weights are equal
    (the embedding cache keys encodings by every weight). No pooling this package writes reads it."""
    bert = BertModel(bert_config(encoder.config), add_pooling_layer=True)
    hidden_size = encoder.config.hidden_size
    weights = {
        **encoder.state_dict(),
        "pooler.dense.weight": torch.eye(hidden_size),
        "pooler.dense.bias": torch.zeros(hidden_size),
    }
    bert.load_state_dict(weights, strict=True)
    return _like(bert, encoder)


def as_bert_for_masked_lm(model: SeedEncoderForMaskedLM | SeedEncoderForPreTraining) -> BertForMaskedLM:
    """`BertForMaskedLM` computing `model`'s MLM logits at every position: its encoder and MLM head (a
    pretraining model's weak decoder is left behind)."""
    bert = BertForMaskedLM(bert_config(model.config))
    weights = {name: tensor for name, tensor in model.state_dict().items() if not name.startswith("weak_decoder.")}
    bert.load_state_dict(weights, strict=True)
    return _like(bert, model)


def as_bert(model: torch.nn.Module) -> torch.nn.Module:
    """`model` as plain BERT when it is a SEED model (the encoder as `BertModel`, a masked-LM or pretraining model as
    `BertForMaskedLM`); any other model unchanged."""
    if isinstance(model, SeedEncoderModel):
        return as_bert_model(model)
    if isinstance(model, (SeedEncoderForMaskedLM, SeedEncoderForPreTraining)):
        return as_bert_for_masked_lm(model)
    return model


__all__ = ["as_bert", "as_bert_for_masked_lm", "as_bert_model", "bert_config"]
