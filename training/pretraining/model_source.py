"""Where a pretraining run's weights and shape come from: a preset or config (new model), a SEED
checkpoint (continued pretraining) or a BERT checkpoint (warm start), plus the checks that the
model, the data and the tokenizer fit together."""

import json
from dataclasses import dataclass
from pathlib import Path

from transformers import AutoConfig

from modeling_seed import SeedEncoderConfig

from ..common.errors import InputError
from ..common.output_dir import ExistingRun
from .arguments import DataArguments, ModelArguments
from .presets import PRESETS
from .sentence_transformer_start import SentenceTransformerStart, read_sentence_transformer_start

# Fields that define the model's shape: a run may only continue into a folder that agrees on them.
ARCHITECTURE_FIELDS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
    "max_position_embeddings", "type_vocab_size", "decoder_num_layers", "decoder_attention_span",
    "decoder_loss_weight", "mlm_loss_weight", "decoder_num_attention_heads", "decoder_intermediate_size", "decoder_condition",
)


@dataclass
class ModelSource:
    """Where the weights come from: 'new' (random init), 'seed' (a SEED checkpoint) or 'bert' (warm start)."""

    kind: str
    config: SeedEncoderConfig
    path: str | None = None
    vocab_follows_tokenizer: bool = False
    overrides: dict | None = None  # the config fields set on the command line
    sentence_transformer: SentenceTransformerStart | None = None  # a SentenceTransformer start, whose modules it keeps


def _parse_overrides(model_args: ModelArguments) -> dict:
    overrides = {}
    if model_args.config_overrides:
        for item in model_args.config_overrides.split(","):
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or key not in SeedEncoderConfig.__dataclass_fields__:
                raise InputError(
                    f"--config_overrides: {item!r} is not 'field=value' with a SeedEncoderConfig field "
                    "(e.g. 'hidden_size=256,num_hidden_layers=6')."
                )
            try:
                overrides[key] = json.loads(value)
            except json.JSONDecodeError:
                overrides[key] = value
    if model_args.decoder_num_layers is not None:
        overrides["decoder_num_layers"] = model_args.decoder_num_layers
    if model_args.decoder_loss_weight is not None:
        overrides["decoder_loss_weight"] = model_args.decoder_loss_weight
    if model_args.mlm_loss_weight is not None:
        overrides["mlm_loss_weight"] = model_args.mlm_loss_weight
    if model_args.decoder_condition is not None:
        overrides["decoder_condition"] = model_args.decoder_condition
    if model_args.decoder_attention_span is not None:
        span = model_args.decoder_attention_span.strip().lower()
        if span in ("full", "none"):
            overrides["decoder_attention_span"] = None
        elif span.isdigit():
            overrides["decoder_attention_span"] = int(span)
        else:
            raise InputError(
                f"--decoder_attention_span {model_args.decoder_attention_span}: expected a positive integer or 'full'."
            )
    return overrides


def _config(shape: dict, overrides: dict) -> SeedEncoderConfig:
    try:
        return SeedEncoderConfig.from_config_dict(shape, **overrides)
    except (ValueError, TypeError) as error:
        raise InputError(f"Invalid model configuration: {error}") from None


def resolve_model_source(model_args: ModelArguments) -> ModelSource:
    overrides = _parse_overrides(model_args)
    if model_args.model_name_or_path is not None:
        path = model_args.model_name_or_path
        if not Path(path).is_dir():
            raise InputError(
                f"--model_name_or_path {path}: no such folder. Pass a local checkpoint folder (this script downloads nothing)."
            )
        start = read_sentence_transformer_start(path)
        if start is not None:
            path = str(start.transformer_folder)
        try:
            base = AutoConfig.from_pretrained(path).to_dict()
        except (OSError, ValueError) as error:
            raise InputError(f"--model_name_or_path {path}: cannot read its config.json ({error}).") from None
        if base.get("model_type") == SeedEncoderConfig.model_type:
            return ModelSource(
                kind="seed", config=_config(base, overrides), path=path, overrides=overrides, sentence_transformer=start
            )
        # A SentenceTransformer's decoder reads the vector it retrieves with, unless told otherwise.
        condition = {"decoder_condition": start.decoder_condition} if start and "decoder_condition" not in overrides else {}
        try:
            config = SeedEncoderConfig.from_bert_config(base, **condition, **overrides)
        except (ValueError, TypeError) as error:
            raise InputError(f"--model_name_or_path {path}: {error}") from None
        return ModelSource(kind="bert", config=config, path=path, overrides=overrides, sentence_transformer=start)

    name = model_args.config_name or "seed-tiny"
    if name in PRESETS:
        config = _config(PRESETS[name], overrides)
        return ModelSource(
            kind="new", config=config, vocab_follows_tokenizer="vocab_size" not in overrides, overrides=overrides
        )
    config_path = Path(name)
    if config_path.is_dir():
        config_path = config_path / "config.json"
    if not config_path.is_file():
        raise InputError(
            f"--config_name {name}: neither a preset ({', '.join(PRESETS)}) nor an existing config.json file or folder."
        )
    try:
        fields = json.loads(config_path.read_text())
    except json.JSONDecodeError as error:
        raise InputError(f"--config_name {config_path}, line {error.lineno}: not valid JSON ({error.msg}).") from None
    return ModelSource(kind="new", config=_config(fields, overrides), overrides=overrides)


def check_lengths(config: SeedEncoderConfig, data_args: DataArguments) -> None:
    if data_args.max_seq_length > config.max_position_embeddings:
        raise InputError(
            f"--max_seq_length {data_args.max_seq_length} exceeds the model's max_position_embeddings "
            f"({config.max_position_embeddings}). Lower --max_seq_length, or for a new model raise it with "
            f"--config_overrides max_position_embeddings={data_args.max_seq_length}."
        )
    if data_args.max_seq_length < 3:
        raise InputError(f"--max_seq_length {data_args.max_seq_length}: needs room for [CLS], a token and [SEP].")


def check_vocabulary(tokenizer, config: SeedEncoderConfig, tokenizer_source: str) -> None:
    if len(tokenizer) > config.vocab_size:
        raise InputError(
            f"The tokenizer from {tokenizer_source} has {len(tokenizer)} tokens, more than the model's vocab_size "
            f"({config.vocab_size}): its ids would index past the embedding table. Use a matching tokenizer, or for a "
            f"new model pass --config_overrides vocab_size={len(tokenizer)}."
        )


def check_same_model(output_dir: str, existing: ExistingRun, config) -> None:
    if existing.config.get("model_type") != config.model_type:
        differences = [f"model_type: {existing.config.get('model_type')!r} there, {config.model_type!r} here"]
    else:
        differences = [
            f"{field}: {saved!r} there, {getattr(config, field)!r} here"
            for field in ARCHITECTURE_FIELDS
            # A folder saved before a field existed was trained with its default.
            if (saved := existing.config.get(field, SeedEncoderConfig.__dataclass_fields__[field].default))
            != getattr(config, field)
        ]
    if differences:
        raise InputError(
            f"--output_dir {output_dir} holds a different model ({'; '.join(differences)}). "
            "Choose another --output_dir, or pass --overwrite_output_dir to replace it."
        )


