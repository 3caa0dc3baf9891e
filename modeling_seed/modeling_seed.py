"""PyTorch SEED-Encoder: a BERT encoder pre-trained with MLM plus a weak autoregressive decoder.

The decoder must rebuild the whole unmasked input from the encoder's [CLS] vector alone, while
being too weak to lean on language patterns: few layers, and in each of them a position sees only
the previous `decoder_attention_span - 1` positions plus the start position. Whatever the sequence
holds therefore has to travel through [CLS], which is the vector a Siamese retriever uses.
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import BaseModelOutputWithPooling, MaskedLMOutput
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.models.bert.modeling_bert import (
    BertAttention,
    BertEmbeddings,
    BertEncoder,
    BertIntermediate,
    BertLayer,
    BertLMPredictionHead,
    BertOnlyMLMHead,
    BertOutput,
    BertSelfAttention,
)
from transformers.utils import ModelOutput
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .configuration_seed import SeedEncoderConfig
from .chunked_loss import IGNORE_INDEX, linear_cross_entropy


def decoder_attention_mask(length: int, span: int | None, device=None) -> torch.Tensor:
    """(length, length) boolean mask, True where decoder query i may attend to key j.

    Causal, limited to the last `span` positions (i-span+1..i), and the start position 0 is
    always visible. `span=None` is plain causal attention.
    """
    query = torch.arange(length, device=device)[:, None]
    key = torch.arange(length, device=device)[None, :]
    visible = key <= query
    if span is not None:
        visible &= (key > query - span) | (key == 0)
    return visible


@dataclass
class SeedDecoderOutput(ModelOutput):
    """Output of [`SeedWeakDecoder`].

    loss: mean reconstruction loss (nats per target token).
    token_losses: (batch, length) loss of each target token, 0 at padding; when requested.
    last_hidden_state: (batch, length, hidden) decoder states, position t predicting token t.
    """

    loss: torch.Tensor | None = None
    token_losses: torch.Tensor | None = None
    last_hidden_state: torch.Tensor | None = None


@dataclass
class SeedEncoderForPreTrainingOutput(ModelOutput):
    """Output of [`SeedEncoderForPreTraining`].

    loss: mlm_loss + decoder_loss_weight * decoder_loss (whichever terms were computed).
    mlm_loss: masked-LM loss over the masked positions.
    decoder_loss: reconstruction loss of the original tokens from [CLS]; None when lambda is 0.
    pooler_output: the [CLS] vectors the decoder was given.
    """

    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    decoder_loss: torch.Tensor | None = None
    pooler_output: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class SeedClsContext(nn.Module):
    """The decoder's cross-attention, whose only key and value is the encoder's [CLS] vector.

    Softmax over a single key is 1, so every position receives that key's value: query and key
    projections could not change the result and are not computed. What remains of BERT's
    cross-attention sublayer is the value and output projections of [CLS], then dropout and a
    residual LayerNorm at every position.
    """

    def __init__(self, config):
        super().__init__()
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor, cls_vectors: torch.Tensor) -> torch.Tensor:
        message = self.dense(self.value(cls_vectors))[:, None, :].to(hidden_states.dtype)
        return self.LayerNorm(hidden_states + self.dropout(message.expand_as(hidden_states)))


class SeedDecoderLayer(GradientCheckpointingLayer):
    """A BERT layer for the weak decoder: span-limited self-attention, attention to [CLS], feed-forward."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.attention = BertAttention(config, is_causal=True, layer_idx=layer_idx)
        self.cls_attention = SeedClsContext(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor, cls_vectors: torch.Tensor) -> torch.Tensor:
        attention_output, _ = self.attention(hidden_states, attention_mask)
        attention_output = self.cls_attention(attention_output, cls_vectors)
        return self.output(self.intermediate(attention_output), attention_output)


class SeedWeakDecoder(nn.Module):
    """Reconstructs the original tokens from [CLS] vectors alone, with teacher forcing.

    Input at position t is the start token (t = 0) or original token t-1; the target is original
    token t. Self-attention is limited by `decoder_attention_span`; the only key and value of
    cross-attention is the [CLS] vector, so no other encoder state reaches the decoder. Token
    embeddings and the output projection are the encoder's word embeddings (tied by the model).
    Callable on its own with any [CLS] vectors, e.g. another sequence's, to measure how much of
    the text the decoder takes from [CLS].
    """

    def __init__(self, config: SeedEncoderConfig):
        super().__init__()
        layer_config = config.decoder_layer_config()
        self.attention_span = config.decoder_attention_span
        self.start_token_id = config.decoder_start_token_id
        self.embeddings = BertEmbeddings(layer_config)
        self.layer = nn.ModuleList(
            [SeedDecoderLayer(layer_config, layer_idx=i) for i in range(config.decoder_num_layers)]
        )
        # Attention modules look up the attention backend in their config at run time: point them at the
        # model's config so `attn_implementation` / `set_attn_implementation` reach the decoder too.
        for module in self.layer.modules():
            if isinstance(module, BertSelfAttention):
                module.config = config

    def forward(
        self,
        cls_vectors: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        return_token_losses: bool = False,
    ) -> SeedDecoderOutput:
        """cls_vectors: (batch, hidden); input_ids: the ORIGINAL (unmasked) ids; attention_mask: 1 on real tokens."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        start = torch.full_like(input_ids[:, :1], self.start_token_id)
        decoder_input_ids = torch.cat([start, input_ids[:, :-1]], dim=1)
        targets = input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)

        key_is_real = torch.cat([torch.ones_like(attention_mask[:, :1]), attention_mask[:, :-1]], dim=1).bool()
        span_mask = decoder_attention_mask(input_ids.shape[1], self.attention_span, input_ids.device)
        visible = span_mask[None, None, :, :] & key_is_real[:, None, None, :]

        hidden_states = self.embeddings(input_ids=decoder_input_ids)
        # Additive form: eager and flex attention add the mask to the scores (a boolean would add 0/1); SDPA reads it too.
        min_value = torch.finfo(hidden_states.dtype).min
        self_attention_mask = torch.zeros(visible.shape, dtype=hidden_states.dtype, device=hidden_states.device)
        self_attention_mask = self_attention_mask.masked_fill(~visible, min_value)
        for layer in self.layer:
            hidden_states = layer(hidden_states, self_attention_mask, cls_vectors)

        output_weight = self.embeddings.word_embeddings.weight
        loss = linear_cross_entropy(hidden_states, output_weight, targets)
        token_losses = None
        if return_token_losses:
            token_losses = linear_cross_entropy(hidden_states, output_weight, targets, reduction="none")
        return SeedDecoderOutput(loss=loss, token_losses=token_losses, last_hidden_state=hidden_states)


class SeedEncoderPreTrainedModel(PreTrainedModel):
    config: SeedEncoderConfig
    # Same parameter names as BERT checkpoints, so a BERT folder warm-starts with plain from_pretrained.
    base_model_prefix = "bert"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_attention_backend = True
    _no_split_modules = ["BertEmbeddings", "BertLayer", "SeedDecoderLayer"]
    _can_record_outputs = {"hidden_states": BertLayer, "attentions": BertSelfAttention}
    # BERT checkpoints carry a tanh pooler (and maybe NSP weights) that SEED does not use.
    _keys_to_ignore_on_load_unexpected = [r"pooler\.", r"cls\.seq_relationship\."]
    # Our losses average over their own targets; Trainer's num_items_in_batch would mis-scale them.
    accepts_loss_kwargs = False

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, BertLMPredictionHead):
            nn.init.zeros_(module.bias)
        elif isinstance(module, BertEmbeddings):
            module.position_ids.copy_(torch.arange(module.position_ids.shape[-1]).expand((1, -1)))
            module.token_type_ids.zero_()


class SeedEncoderModel(SeedEncoderPreTrainedModel):
    """The Siamese encoder. `pooler_output` is the last layer's [CLS] vector, untransformed."""

    _keys_to_ignore_on_load_unexpected = SeedEncoderPreTrainedModel._keys_to_ignore_on_load_unexpected + [
        r"^cls\.",
        r"^weak_decoder\.",
    ]

    def __init__(self, config: SeedEncoderConfig):
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("SeedEncoderModel: pass exactly one of `input_ids` or `inputs_embeds`.")
        embedding_output = self.embeddings(
            input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids, inputs_embeds=inputs_embeds
        )
        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=embedding_output, attention_mask=attention_mask
        )
        sequence_output = self.encoder(embedding_output, attention_mask=attention_mask, **kwargs).last_hidden_state
        return BaseModelOutputWithPooling(last_hidden_state=sequence_output, pooler_output=sequence_output[:, 0])


class SeedEncoderForMaskedLM(SeedEncoderPreTrainedModel):
    """Encoder + MLM head with logits at every position: the form a SPLADE `SparseEncoder` builds on."""

    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }
    _keys_to_ignore_on_load_unexpected = SeedEncoderPreTrainedModel._keys_to_ignore_on_load_unexpected + [
        r"^weak_decoder\."
    ]

    def __init__(self, config: SeedEncoderConfig):
        super().__init__(config)
        self.bert = SeedEncoderModel(config)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> MaskedLMOutput:
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        logits = self.cls(outputs.last_hidden_state)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.view(-1), ignore_index=IGNORE_INDEX)
        return MaskedLMOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions)


class SeedEncoderForPreTraining(SeedEncoderPreTrainedModel):
    """Encoder (`bert`) + MLM head (`cls`) + weak decoder (`weak_decoder`), trained with
    loss = MLM + decoder_loss_weight * reconstruction.

    Only masked positions get MLM logits, and no loss materialises batch x length x vocabulary
    logits. With `decoder_loss_weight=0` no decoder is built or run: the MLM-only baseline.
    """

    _tied_weights_keys = SeedEncoderForMaskedLM._tied_weights_keys
    _decoder_tied_weights_keys = {"weak_decoder.embeddings.word_embeddings.weight": "bert.embeddings.word_embeddings.weight"}

    def __init__(self, config: SeedEncoderConfig):
        super().__init__(config)
        self.bert = SeedEncoderModel(config)
        self.cls = BertOnlyMLMHead(config)
        self.weak_decoder = None
        if config.decoder_loss_weight > 0:
            self.weak_decoder = SeedWeakDecoder(config)
            self._tied_weights_keys = {**self._tied_weights_keys, **self._decoder_tied_weights_keys}
        self.post_init()

    @classmethod
    def from_bert(cls, bert_path: str, **config_overrides) -> "SeedEncoderForPreTraining":
        """Warm start: a SEED pretraining model whose encoder (and MLM head, when the checkpoint
        has one) carries the weights of any BERT-family checkpoint folder, with a fresh decoder.

        `config_overrides` set SEED fields, e.g. `decoder_attention_span=8`.
        """
        from transformers import AutoConfig

        bert_config = AutoConfig.from_pretrained(bert_path).to_dict()
        return cls.from_pretrained(bert_path, config=SeedEncoderConfig.from_config_dict(bert_config, **config_overrides))

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    def masked_lm_loss(self, sequence_output: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        is_masked = labels != IGNORE_INDEX
        transformed = self.cls.predictions.transform(sequence_output[is_masked])
        return linear_cross_entropy(
            transformed, self.cls.predictions.decoder.weight, labels[is_masked], bias=self.cls.predictions.bias
        )

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        unmasked_input_ids: torch.Tensor | None = None,
        **kwargs,
    ) -> SeedEncoderForPreTrainingOutput:
        r"""
        labels: original ids at masked positions, -100 elsewhere (as `DataCollatorForLanguageModeling` makes them).
        unmasked_input_ids: the input before masking, the decoder's target. When omitted it is
            rebuilt from `input_ids` and `labels`.
        """
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            **kwargs,
        )
        mlm_loss = self.masked_lm_loss(outputs.last_hidden_state, labels) if labels is not None else None

        decoder_loss = None
        if self.weak_decoder is not None:
            if unmasked_input_ids is None and labels is not None:
                unmasked_input_ids = torch.where(labels != IGNORE_INDEX, labels, input_ids)
            if unmasked_input_ids is not None:
                decoder_loss = self.weak_decoder(outputs.pooler_output, unmasked_input_ids, attention_mask).loss

        loss = None
        if mlm_loss is not None or decoder_loss is not None:
            loss = (mlm_loss if mlm_loss is not None else 0.0) + (
                self.config.decoder_loss_weight * decoder_loss if decoder_loss is not None else 0.0
            )
        return SeedEncoderForPreTrainingOutput(
            loss=loss,
            mlm_loss=mlm_loss,
            decoder_loss=decoder_loss,
            pooler_output=outputs.pooler_output,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


__all__ = [
    "SeedEncoderPreTrainedModel",
    "SeedEncoderModel",
    "SeedEncoderForMaskedLM",
    "SeedEncoderForPreTraining",
    "SeedWeakDecoder",
    "decoder_attention_mask",
]
