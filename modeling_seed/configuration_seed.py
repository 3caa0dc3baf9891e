"""SEED-Encoder configuration: a BERT encoder plus the weak decoder that pre-trains it."""

from huggingface_hub.dataclasses import strict
from transformers import BertConfig, PreTrainedConfig

# Written into every saved config.json so that a folder loads with `trust_remote_code=True`
# in an interpreter where the `modeling_seed` package is not installed.
AUTO_MAP = {
    "AutoConfig": "configuration_seed.SeedEncoderConfig",
    "AutoModel": "modeling_seed.SeedEncoderModel",
    "AutoModelForMaskedLM": "modeling_seed.SeedEncoderForMaskedLM",
    "AutoModelForPreTraining": "modeling_seed.SeedEncoderForPreTraining",
}

# The vectors the weak decoder may read: the last layer's [CLS] state, or its attention-masked mean.
DECODER_CONDITIONS = ("cls", "mean")

# Checkpoints a warm start loads: their parameter names and embeddings are the SEED encoder's own.
WARM_START_MODEL_TYPES = ("bert",)


@strict
class SeedEncoderConfig(PreTrainedConfig):
    r"""
    Configuration of a SEED-Encoder (Lu et al., EMNLP 2021, "Less is More: Pre-training a Strong Siamese
    Encoder Using a Weak Decoder").

    The encoder fields are BERT's and keep BERT's names and defaults (BERT-base), so any BERT config
    converts with `SeedEncoderConfig(**bert_config.to_dict())`. The decoder fields describe the weak
    decoder that reconstructs the input from the encoder's [CLS] vector during pretraining:

    decoder_num_layers (`int`, defaults to 3):
        Depth of the weak decoder.
    decoder_attention_span (`int` or `None`, defaults to 2):
        In every decoder layer, position i attends to positions i-span+1..i and to position 0 (the start
        position). Position i predicts token i from token i-1, so one layer with span k reads tokens
        i-k..i-1; as in sliding-window attention, stacked layers chain the window, and an L-layer decoder
        reads back to token i-L*(k-1)-1. `None` gives an ordinary causal decoder (the paper's "strong
        decoder" ablation).
    decoder_loss_weight (`float`, defaults to 1.0):
        lambda in loss = MLM + lambda * reconstruction. 0 builds no decoder: the MLM-only baseline.
    mlm_loss_weight (`float`, defaults to 1.0):
        The MLM term's weight: loss = mlm_loss_weight * MLM + lambda * reconstruction. 0 trains the decoder alone
        (no MLM loss is computed; the MLM head is kept but left untrained), the closest analogue of TSDAE.
    decoder_num_attention_heads (`int`, *optional*):
        Defaults to `num_attention_heads`.
    decoder_intermediate_size (`int`, *optional*):
        Defaults to `intermediate_size`.
    decoder_start_token_id (`int`, *optional*):
        Token placed at the decoder's start position; defaults to `pad_token_id`.
    decoder_condition (`str`, defaults to `"cls"`):
        The one vector the decoder reads: `"cls"`, the last layer's [CLS] state (the paper's), or `"mean"`, the
        attention-masked mean of the last layer, the vector a mean-pooling Siamese model (sentence-transformers'
        `Pooling("mean")`, e.g. all-MiniLM-L6-v2) retrieves with.
    """

    model_type = "seed_encoder"

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float | int = 0.1
    attention_probs_dropout_prob: float | int = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0
    tie_word_embeddings: bool = True
    # Read by the reused BERT layers; the SEED encoder is always bidirectional.
    is_decoder: bool = False
    add_cross_attention: bool = False

    decoder_num_layers: int = 3
    decoder_attention_span: int | None = 2
    decoder_loss_weight: float | int = 1.0
    mlm_loss_weight: float | int = 1.0
    decoder_num_attention_heads: int | None = None
    decoder_intermediate_size: int | None = None
    decoder_start_token_id: int | None = None
    decoder_condition: str = "cls"

    def __post_init__(self, **kwargs):
        if self.decoder_num_attention_heads is None:
            self.decoder_num_attention_heads = self.num_attention_heads
        if self.decoder_intermediate_size is None:
            self.decoder_intermediate_size = self.intermediate_size
        if self.decoder_start_token_id is None:
            self.decoder_start_token_id = self.pad_token_id
        if getattr(self, "auto_map", None) is None:
            self.auto_map = dict(AUTO_MAP)
        super().__post_init__(**kwargs)

    def validate_architecture(self):
        """Part of `@strict` validation: reject shapes the model cannot be built with."""
        super().validate_architecture()
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size",
                     "decoder_num_attention_heads", "decoder_intermediate_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"SeedEncoderConfig: `{name}` must be at least 1, got {getattr(self, name)}.")
        for heads_name in ("num_attention_heads", "decoder_num_attention_heads"):
            heads = getattr(self, heads_name)
            if self.hidden_size % heads != 0:
                divisors = [n for n in range(1, min(self.hidden_size, 64) + 1) if self.hidden_size % n == 0]
                raise ValueError(
                    f"SeedEncoderConfig: `hidden_size` ({self.hidden_size}) must be divisible by `{heads_name}` "
                    f"({heads}); head counts that divide it: {', '.join(map(str, divisors))}."
                )
        if self.decoder_num_layers < 0:
            raise ValueError(f"SeedEncoderConfig: `decoder_num_layers` must be >= 0, got {self.decoder_num_layers}.")
        if self.decoder_attention_span is not None and self.decoder_attention_span < 1:
            raise ValueError(
                f"SeedEncoderConfig: `decoder_attention_span` must be >= 1 (1 lets a position see only itself and "
                f"the start position) or None for a full causal decoder, got {self.decoder_attention_span}."
            )
        if self.decoder_loss_weight < 0:
            raise ValueError(
                f"SeedEncoderConfig: `decoder_loss_weight` (lambda) must be >= 0, got {self.decoder_loss_weight}; "
                "use 0 for the MLM-only baseline."
            )
        if self.mlm_loss_weight < 0:
            raise ValueError(
                f"SeedEncoderConfig: `mlm_loss_weight` must be >= 0, got {self.mlm_loss_weight}; use 0 to train the "
                "decoder alone."
            )
        if self.mlm_loss_weight == 0 and self.decoder_loss_weight == 0:
            raise ValueError(
                "SeedEncoderConfig: `mlm_loss_weight` and `decoder_loss_weight` are both 0, so no loss would train the "
                "model. Set one of them above 0 (MLM only: decoder_loss_weight 0; the decoder alone: mlm_loss_weight 0)."
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"SeedEncoderConfig: `{name}` must be in [0, 1), got {getattr(self, name)}.")
        if self.decoder_condition not in DECODER_CONDITIONS:
            raise ValueError(
                f"SeedEncoderConfig: `decoder_condition` must be one of {', '.join(map(repr, DECODER_CONDITIONS))} (the "
                f"vector the decoder reads: the [CLS] state, or the masked mean of the last layer), got "
                f"{self.decoder_condition!r}."
            )
        for name in ("pad_token_id", "decoder_start_token_id"):
            token_id = getattr(self, name)
            if token_id is not None and not 0 <= token_id < self.vocab_size:
                raise ValueError(
                    f"SeedEncoderConfig: `{name}` ({token_id}) must be a vocabulary id in [0, {self.vocab_size})."
                )

    @classmethod
    def from_config_dict(cls, config_dict: dict, **overrides) -> "SeedEncoderConfig":
        """A SEED config taking its shape from another model's config dict: BERT's encoder fields from a
        BERT config (a warm start gets the default decoder), and the decoder's too from a SEED config.
        Every other entry is ignored; `overrides` win."""
        shape = {key: value for key, value in config_dict.items() if key in cls.__annotations__}
        return cls(**{**shape, **overrides})

    @classmethod
    def from_bert_config(cls, config_dict: dict, **overrides) -> "SeedEncoderConfig":
        """`from_config_dict` for a warm start, refusing (ValueError) a checkpoint whose weights the SEED
        encoder would not compute with as their own model does."""
        model_type = config_dict.get("model_type")
        if model_type not in WARM_START_MODEL_TYPES:
            raise ValueError(
                f"model_type {model_type!r} cannot warm-start a SEED-Encoder: only BERT checkpoints (model_type "
                f"{', '.join(map(repr, WARM_START_MODEL_TYPES))}, e.g. all-MiniLM-L6-v2) load into its BERT encoder "
                "unchanged. RoBERTa, XLM-R and CamemBERT number positions from padding_idx + 1 and have one token "
                "type, and ELECTRA stores its encoder under `electra.` and projects its smaller embeddings, so their "
                "weights would compute something else or stay unloaded. Start from a BERT checkpoint, or continue a "
                f"SEED checkpoint (model_type {cls.model_type!r})."
            )
        return cls.from_config_dict(config_dict, **overrides)

    def to_dict(self) -> dict:
        config_dict = super().to_dict()
        # sentence-transformers' SparseEncoder builds a SPLADE model only when an architecture ends in
        # "ForMaskedLM"; a pretraining checkpoint holds the MLM head, so it says it loads that way too.
        if config_dict.get("architectures") == ["SeedEncoderForPreTraining"]:
            config_dict["architectures"] = ["SeedEncoderForPreTraining", "SeedEncoderForMaskedLM"]
        return config_dict

    def decoder_layer_config(self) -> BertConfig:
        """The config the decoder's BERT building blocks are built from: the decoder's sizes."""
        return BertConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.decoder_num_layers,
            num_attention_heads=self.decoder_num_attention_heads,
            intermediate_size=self.decoder_intermediate_size,
            hidden_act=self.hidden_act,
            hidden_dropout_prob=self.hidden_dropout_prob,
            attention_probs_dropout_prob=self.attention_probs_dropout_prob,
            max_position_embeddings=self.max_position_embeddings,
            type_vocab_size=1,
            layer_norm_eps=self.layer_norm_eps,
            pad_token_id=self.pad_token_id,
            is_decoder=True,
        )


__all__ = ["SeedEncoderConfig"]
