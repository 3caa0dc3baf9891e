"""SEED-Encoder for Hugging Face transformers.

Importing this package registers the SEED classes with the Auto classes, so that
`AutoModel`, `AutoModelForMaskedLM` and `AutoModelForPreTraining` load SEED folders, and marks
them for export so `save_pretrained` writes the code a `trust_remote_code=True` load needs.
"""

from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining

from .configuration_seed import SeedEncoderConfig
from .data_collator import DataCollatorForSeedPretraining
from .chunked_loss import linear_cross_entropy
from .modeling_seed import (
    SeedDecoderOutput,
    SeedEncoderForMaskedLM,
    SeedEncoderForPreTraining,
    SeedEncoderForPreTrainingOutput,
    SeedEncoderModel,
    SeedEncoderPreTrainedModel,
    SeedWeakDecoder,
    decoder_attention_mask,
    span_limited_attention,
)
from .plain_bert import as_bert, as_bert_for_masked_lm, as_bert_model

AutoConfig.register(SeedEncoderConfig.model_type, SeedEncoderConfig, exist_ok=True)
SeedEncoderConfig.register_for_auto_class()
for auto_class, model_class in (
    (AutoModel, SeedEncoderModel),
    (AutoModelForMaskedLM, SeedEncoderForMaskedLM),
    (AutoModelForPreTraining, SeedEncoderForPreTraining),
):
    auto_class.register(SeedEncoderConfig, model_class, exist_ok=True)
    model_class.register_for_auto_class(auto_class.__name__)

__all__ = [
    "SeedEncoderConfig",
    "SeedEncoderModel",
    "SeedEncoderForMaskedLM",
    "SeedEncoderForPreTraining",
    "SeedEncoderForPreTrainingOutput",
    "SeedEncoderPreTrainedModel",
    "SeedWeakDecoder",
    "SeedDecoderOutput",
    "DataCollatorForSeedPretraining",
    "decoder_attention_mask",
    "span_limited_attention",
    "linear_cross_entropy",
    "as_bert",
    "as_bert_model",
    "as_bert_for_masked_lm",
]
