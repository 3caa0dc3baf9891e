"""PyTorch SEED-Encoder: a BERT encoder pre-trained with MLM plus a weak autoregressive decoder.

The decoder must rebuild the whole unmasked input from the encoder's [CLS] vector alone, while
being too weak to lean on language patterns: few layers, and in each of them a position sees only
the previous `decoder_attention_span - 1` positions plus the start position. Whatever the sequence
holds therefore has to travel through [CLS], which is the vector a Siamese retriever uses.
"""

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
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
    eager_attention_forward,
)
from transformers.utils import ModelOutput, logging
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .configuration_seed import SeedEncoderConfig
from .chunked_loss import IGNORE_INDEX, linear_cross_entropy

logger = logging.get_logger(__name__)


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


def span_limited_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    key_is_real: torch.Tensor,
    span: int,
    scaling: float,
    dropout: float = 0.0,
) -> torch.Tensor:
    """Attention under `decoder_attention_mask(length, span)` and `key_is_real`, one key slot at a time.

    query/key/value: (batch, heads, length, head_dim); key_is_real: (batch, length) bool.
    Position i has at most span + 1 keys (i-span+1..i and the start position), so only those
    scores are computed: O(length x span) instead of the length x length scores, softmax and
    dropout mask of dense attention, which a weak decoder would mostly throw away.
    Returns (batch, heads, length, head_dim), equal to dense masked attention.
    """
    length = query.shape[2]
    # Slot w (0..span-1) holds key position i - span + 1 + w; slot `span` holds the start position.
    padded_key = F.pad(key, (0, 0, span - 1, 0))
    padded_value = F.pad(value, (0, 0, span - 1, 0))
    scores = [(query * padded_key[:, :, w : w + length]).sum(-1) for w in range(span)]
    scores.append((query * key[:, :, :1]).sum(-1))
    scores = torch.stack(scores, dim=-1).float() * scaling

    window_is_real = F.pad(key_is_real, (span - 1, 0), value=False).unfold(1, span, 1)
    # Until position `span` the window already contains the start position: count it once.
    start_is_extra = (torch.arange(length, device=query.device) >= span)[None, :, None]
    visible = torch.cat([window_is_real, start_is_extra.expand(key_is_real.shape[0], -1, -1)], dim=-1)
    probabilities = scores.masked_fill(~visible[:, None], float("-inf")).softmax(dim=-1).to(value.dtype)
    probabilities = F.dropout(probabilities, p=dropout, training=dropout > 0)

    output = probabilities[..., span:] * value[:, :, :1]
    for w in range(span):
        output = output + probabilities[..., w : w + 1] * padded_value[:, :, w : w + length]
    return output


def project_to_heads(states: torch.Tensor, projection: nn.Linear, head_size: int) -> torch.Tensor:
    """(batch, length, hidden) -> (batch, heads, length, head_size), as BERT's attention splits its projections."""
    return projection(states).view(*states.shape[:-1], -1, head_size).transpose(1, 2)


def bert_layer_at_positions(
    layer: BertLayer, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, positions: torch.Tensor
) -> torch.Tensor:
    """`layer(hidden_states)` evaluated only at `positions` (batch, num_positions): every position
    still serves as a key and value, but queries, attention output and feed-forward run only where
    an output is wanted. attention_mask: (batch, length), 1 on real tokens, or None.
    Returns (batch, num_positions, hidden), equal to the full layer's output gathered at `positions`.
    """
    self_attention = layer.attention.self
    query_states = hidden_states.gather(1, positions[..., None].expand(-1, -1, hidden_states.shape[-1]))

    query_mask = create_bidirectional_mask(
        config=self_attention.config,
        inputs_embeds=query_states,
        attention_mask=attention_mask,
        encoder_hidden_states=hidden_states,
    )
    attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
        self_attention.config._attn_implementation, eager_attention_forward
    )
    context, _ = attention_interface(
        self_attention,
        project_to_heads(query_states, self_attention.query, self_attention.attention_head_size),
        project_to_heads(hidden_states, self_attention.key, self_attention.attention_head_size),
        project_to_heads(hidden_states, self_attention.value, self_attention.attention_head_size),
        query_mask,
        dropout=self_attention.dropout.p if self_attention.training else 0.0,
        scaling=self_attention.scaling,
    )
    attention_output = layer.attention.output(context.reshape(*query_states.shape[:-1], -1), query_states)
    return layer.feed_forward_chunk(attention_output)


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

    loss: mlm_loss_weight * mlm_loss + decoder_loss_weight * decoder_loss (whichever terms were computed).
    mlm_loss: masked-LM loss over the masked positions; None when mlm_loss_weight is 0.
    decoder_loss: reconstruction loss of the original tokens from [CLS]; None when lambda is 0.
    pooler_output: the vectors the decoder was given ([CLS] states, or their masked mean: `decoder_condition`).
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


class SeedDecoderSelfAttention(BertSelfAttention):
    """BERT self-attention (same weights) that, given `key_is_real`, computes only the scores a
    span-limited position can have (`span_limited_attention`); otherwise BERT's attention backend
    with the dense additive mask."""

    def __init__(self, config, attention_span: int | None, layer_idx: int):
        super().__init__(config, is_causal=True, layer_idx=layer_idx)
        self.attention_span = attention_span

    def forward(self, hidden_states, attention_mask=None, key_is_real=None, **kwargs):
        if key_is_real is None:
            return super().forward(hidden_states, attention_mask, **kwargs)
        query, key, value = (
            project_to_heads(hidden_states, projection, self.attention_head_size)
            for projection in (self.query, self.key, self.value)
        )
        dropout = self.dropout.p if self.training else 0.0
        output = span_limited_attention(query, key, value, key_is_real, self.attention_span, self.scaling, dropout)
        return output.transpose(1, 2).reshape(*hidden_states.shape[:-1], -1), None


class SeedDecoderLayer(GradientCheckpointingLayer):
    """A BERT layer for the weak decoder: span-limited self-attention, attention to [CLS], feed-forward."""

    def __init__(self, config, layer_idx: int, attention_span: int | None = None):
        super().__init__()
        self.attention = BertAttention(config, is_causal=True, layer_idx=layer_idx)
        self.attention.self = SeedDecoderSelfAttention(config, attention_span, layer_idx)
        self.cls_attention = SeedClsContext(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        cls_vectors: torch.Tensor,
        key_is_real: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Pass either the dense additive `attention_mask` or `key_is_real` (batch, length) for the span-limited path."""
        attention_output, _ = self.attention(hidden_states, attention_mask, key_is_real=key_is_real)
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
            [
                SeedDecoderLayer(layer_config, layer_idx=i, attention_span=self.attention_span)
                for i in range(config.decoder_num_layers)
            ]
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
        hidden_states = self.embeddings(input_ids=decoder_input_ids)
        if self.uses_span_limited_attention(input_ids.shape[1]):
            self_attention_mask = None
        else:
            key_is_real, self_attention_mask = None, self.dense_attention_mask(key_is_real, hidden_states.dtype)
        for layer in self.layer:
            hidden_states = layer(hidden_states, self_attention_mask, cls_vectors, key_is_real=key_is_real)

        output_weight = self.embeddings.word_embeddings.weight
        loss = linear_cross_entropy(hidden_states, output_weight, targets)
        token_losses = None
        if return_token_losses:
            token_losses = linear_cross_entropy(hidden_states, output_weight, targets, reduction="none")
        return SeedDecoderOutput(loss=loss, token_losses=token_losses, last_hidden_state=hidden_states)

    def uses_span_limited_attention(self, length: int) -> bool:
        """Whether self-attention computes only the in-span scores: measured on CPU, that path is
        faster than dense attention up to spans of about length / 8 (3-5x at the default span 2)."""
        return self.attention_span is not None and self.attention_span * 8 <= length

    def dense_attention_mask(self, key_is_real: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """(batch, 1, length, length) additive mask of `decoder_attention_mask` and the real keys."""
        length = key_is_real.shape[1]
        span_mask = decoder_attention_mask(length, self.attention_span, key_is_real.device)
        visible = span_mask[None, None, :, :] & key_is_real[:, None, None, :]
        # Additive form: eager and flex attention add the mask to the scores (a boolean would add 0/1); SDPA reads it too.
        mask = torch.zeros(visible.shape, dtype=dtype, device=key_is_real.device)
        return mask.masked_fill(~visible, torch.finfo(dtype).min)


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


def _absent_mlm_head_tie_warning(record) -> bool:
    """A logging filter: False for transformers' "This checkpoint seem corrupted" about the MLM head's bias, which a
    Siamese encoder's checkpoint (BertModel, no head) gives on every warm start. The checkpoint is not corrupted, and
    `from_encoder_checkpoint` says that the head is new, in words a user can act on."""
    message = record.getMessage()
    return not (message.startswith("This checkpoint seem corrupted") and "cls.predictions" in message)


class SeedEncoderForPreTraining(SeedEncoderPreTrainedModel):
    """Encoder (`bert`) + MLM head (`cls`) + weak decoder (`weak_decoder`), trained with
    loss = mlm_loss_weight * MLM + decoder_loss_weight * reconstruction.

    Only masked positions get MLM logits, no loss materialises batch x length x vocabulary logits,
    and the last encoder layer runs only where a loss reads it ([CLS] and the masked positions)
    unless hidden states or attentions are requested. With `decoder_loss_weight=0` no decoder is
    built or run: the MLM-only baseline; with `mlm_loss_weight=0` no MLM loss is computed: the decoder alone.
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
        has one) carries the weights of a BERT checkpoint folder, with a fresh decoder. Other model
        types, and checkpoints that lack encoder weights, are refused with a ValueError.

        `config_overrides` set SEED fields, e.g. `decoder_attention_span=8`.
        """
        from transformers import AutoConfig

        bert_config = AutoConfig.from_pretrained(bert_path).to_dict()
        return cls.from_encoder_checkpoint(bert_path, SeedEncoderConfig.from_bert_config(bert_config, **config_overrides))

    @classmethod
    def from_encoder_checkpoint(cls, path: str, config: SeedEncoderConfig) -> "SeedEncoderForPreTraining":
        """`from_pretrained(path, config=config)` that raises a ValueError naming every encoder weight the
        checkpoint does not fill (absent, or of another shape), instead of leaving it at its random
        initialisation; the MLM head and the decoder may start fresh."""
        loading_logger = logging.get_logger("transformers.modeling_utils")
        loading_logger.addFilter(_absent_mlm_head_tie_warning)
        try:
            model, loading_info = cls.from_pretrained(
                path, config=config, output_loading_info=True, ignore_mismatched_sizes=True
            )
        finally:
            loading_logger.removeFilter(_absent_mlm_head_tie_warning)
        encoder = f"{cls.base_model_prefix}."
        unfilled = [
            f"{name} (not in the checkpoint)" for name in sorted(loading_info["missing_keys"]) if name.startswith(encoder)
        ]
        unfilled += [
            f"{name} ({tuple(there)} in the checkpoint, {tuple(here)} in the model)"
            for name, there, here in sorted(loading_info["mismatched_keys"])
            if name.startswith(encoder)
        ]
        if unfilled:
            raise ValueError(
                f"{path}: {len(unfilled)} encoder weight(s) would start from random values instead of the "
                f"checkpoint's: {'; '.join(unfilled)}. Use a checkpoint that holds the whole encoder, in the shape "
                "its config.json gives, as BertModel, BertForMaskedLM or a SEED model save it."
            )
        new_head = [name for name in loading_info["missing_keys"] if name.startswith("cls.")]
        if new_head:
            logger.warning(
                "%s holds no MLM head (%d weights, e.g. %s): BERT's head starts from its initialisation, its decoder "
                "tied to the word embeddings and its bias at 0, and is trained from there.", path, len(new_head),
                sorted(new_head)[0],
            )
        return model

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    def freeze_encoder(self) -> None:
        """Stop the encoder's weights training, the word embeddings the heads share with it included, so that only
        the MLM head's transform and bias and the weak decoder's own weights learn: new heads behind a trained
        encoder first learn to read it as it is, before their first, random gradients can reach it (linear probing
        before fine-tuning, Kumar et al., ICLR 2022)."""
        self.bert.requires_grad_(False)

    def decoder_context(self, last_hidden_state: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """(batch, hidden) vectors the decoder reads (`config.decoder_condition`): the last layer's [CLS] states, or
        their attention-masked mean over the real tokens, as sentence-transformers' mean pooling computes it."""
        if self.config.decoder_condition == "cls":
            return last_hidden_state[:, 0]
        if attention_mask is None:
            return last_hidden_state.mean(dim=1)
        weights = attention_mask[..., None].to(last_hidden_state.dtype)
        return (last_hidden_state * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)

    def masked_lm_loss(self, sequence_output: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        is_masked = labels != IGNORE_INDEX
        transformed = self.cls.predictions.transform(sequence_output[is_masked])
        return linear_cross_entropy(
            transformed, self.cls.predictions.decoder.weight, labels[is_masked], bias=self.cls.predictions.bias
        )

    def encode_loss_positions(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The encoder's last-layer states where a loss reads them: [CLS] (the decoder's input) and the
        masked positions. The last layer runs its queries and feed-forward at those positions alone,
        since no loss reads the others; the lower layers run everywhere.

        Returns ([CLS] vectors (batch, hidden), (batch, num_positions, hidden) states, their labels:
        the original id at a masked position, -100 at [CLS] and at filler slots of shorter rows).
        """
        hidden_states = self.bert.embeddings(input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids)
        full_mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask)
        *lower_layers, last_layer = self.bert.encoder.layer
        for layer in lower_layers:
            hidden_states = layer(hidden_states, full_mask)

        is_read = labels != IGNORE_INDEX
        is_read[:, 0] = True
        # Each row's read positions first, in order ([CLS] at slot 0); rows with fewer are filled with unread positions.
        num_slots = int(is_read.sum(dim=1).max())
        positions = torch.argsort((~is_read).to(torch.uint8), dim=1, stable=True)[:, :num_slots]
        if last_layer.gradient_checkpointing and last_layer.training and torch.is_grad_enabled():
            states = last_layer._gradient_checkpointing_func(
                partial(bert_layer_at_positions, last_layer), hidden_states, attention_mask, positions
            )
        else:
            states = bert_layer_at_positions(last_layer, hidden_states, attention_mask, positions)
        return states[:, 0], states, labels.gather(1, positions)

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
        wants_all_states = kwargs.get("output_hidden_states", self.config.output_hidden_states) or kwargs.get(
            "output_attentions", self.config.output_attentions
        )
        hidden_states = attentions = None
        # Only the [CLS] condition may skip the last layer's other positions; the mean reads them all.
        trains_mlm = self.config.mlm_loss_weight > 0
        if labels is not None and not wants_all_states and self.config.decoder_condition == "cls":
            # Without the MLM term only [CLS] is read from the last layer.
            read_labels = labels if trains_mlm else torch.full_like(labels, IGNORE_INDEX)
            sentence_vectors, states, position_labels = self.encode_loss_positions(
                input_ids, read_labels, attention_mask, token_type_ids, position_ids
            )
            mlm_loss = self.masked_lm_loss(states, position_labels) if trains_mlm else None
        else:
            outputs = self.bert(
                input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                position_ids=position_ids,
                **kwargs,
            )
            sentence_vectors = self.decoder_context(outputs.last_hidden_state, attention_mask)
            hidden_states, attentions = outputs.hidden_states, outputs.attentions
            mlm_loss = self.masked_lm_loss(outputs.last_hidden_state, labels) if labels is not None and trains_mlm else None

        decoder_loss = None
        if self.weak_decoder is not None:
            if unmasked_input_ids is None and labels is not None:
                unmasked_input_ids = torch.where(labels != IGNORE_INDEX, labels, input_ids)
            if unmasked_input_ids is not None:
                decoder_loss = self.weak_decoder(sentence_vectors, unmasked_input_ids, attention_mask).loss

        loss = None
        if mlm_loss is not None or decoder_loss is not None:
            loss = (self.config.mlm_loss_weight * mlm_loss if mlm_loss is not None else 0.0) + (
                self.config.decoder_loss_weight * decoder_loss if decoder_loss is not None else 0.0
            )
        return SeedEncoderForPreTrainingOutput(
            loss=loss,
            mlm_loss=mlm_loss,
            decoder_loss=decoder_loss,
            pooler_output=sentence_vectors,
            hidden_states=hidden_states,
            attentions=attentions,
        )


__all__ = [
    "SeedEncoderPreTrainedModel",
    "SeedEncoderModel",
    "SeedEncoderForMaskedLM",
    "SeedEncoderForPreTraining",
    "SeedWeakDecoder",
    "decoder_attention_mask",
    "span_limited_attention",
]
