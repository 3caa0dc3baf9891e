"""Load a model folder as a dense `SentenceTransformer` or a SPLADE `SparseEncoder`: shared by evaluation and fine-tuning.

A folder is one of three kinds, told apart by its files: a sentence-transformers model (`modules.json`; its
`config_sentence_transformers.json` says SentenceTransformer or SparseEncoder) or a bare transformers checkpoint
(`config.json`: a SEED pretraining folder or any BERT-family encoder), which gets the modules built here.

A SEED encoder is loaded as plain BERT (`modeling_seed.as_bert`: the same weights and outputs), so that what is
fine-tuned from it, and saved, is a `BertModel` or `BertForMaskedLM` that loads without this package or remote code.
"""

import json
import logging
from pathlib import Path

from safetensors import SafetensorError
from sentence_transformers import SentenceTransformer, SparseEncoder
from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
from sentence_transformers.sparse_encoder.modules import SpladePooling
from sentence_transformers.sparse_encoder.modules import Transformer as SparseTransformer
from transformers import CONFIG_MAPPING

import modeling_seed  # noqa: F401  (registers SEED with the Auto classes, so SEED folders load without remote code)
from modeling_seed import as_bert

from .errors import InputError

logger = logging.getLogger(__name__)

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
# A bare checkpoint's pooling when none is asked for: the SEED paper compares [CLS] vectors.
DEFAULT_POOLING = "cls"


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"{path}: cannot be read as JSON ({error}). Check the model folder is complete.") from None


def split_model_spec(spec: str) -> tuple[str, str]:
    """('dense' or 'sparse', PATH) for a 'dense:PATH' or 'sparse:PATH' spec, which says how to run the model; ('', spec)
    for a plain folder, run as what it is."""
    for form in ("dense", "sparse"):
        if spec.startswith(f"{form}:"):
            return form, spec[len(form) + 1 :]
    return "", spec


def model_kind(path: str) -> str:
    """'sentence-transformer', 'sparse-encoder', 'cross-encoder' or 'transformers', from the files in the folder."""
    folder = Path(path)
    if not folder.is_dir():
        raise InputError(f"{path}: no such model folder. Pass a local folder (nothing is downloaded).")
    if (folder / "modules.json").is_file():
        st_config = folder / "config_sentence_transformers.json"
        # sentence-transformers itself treats a model without this entry as a SentenceTransformer.
        model_type = _read_json(st_config).get("model_type", "SentenceTransformer") if st_config.is_file() else "SentenceTransformer"
        kinds = {"SentenceTransformer": "sentence-transformer", "SparseEncoder": "sparse-encoder", "CrossEncoder": "cross-encoder"}
        if model_type not in kinds:
            raise InputError(
                f"{path}: a sentence-transformers {model_type} model, which neither embeds queries and documents nor "
                "scores their pairs. Pass a SentenceTransformer, SparseEncoder or CrossEncoder folder, or a transformers "
                "checkpoint."
            )
        return kinds[model_type]
    if (folder / "config.json").is_file():
        if not any((folder / name).is_file() for name in WEIGHT_FILES):
            raise InputError(
                f"{path}: has a config.json but no weights ({', '.join(WEIGHT_FILES)}). Pass a complete model folder."
            )
        return "transformers"
    raise InputError(
        f"{path}: holds no model (neither the modules.json of a sentence-transformers model nor the config.json of a "
        "transformers checkpoint). Pass a model folder."
    )


def _hub_kwargs(folder: str) -> dict:
    """Loading options: local files only, and the folder's own code only when transformers does not know its type."""
    config = Path(folder) / "config.json"
    fields = _read_json(config) if config.is_file() else {}
    trust_remote_code = "auto_map" in fields and fields.get("model_type") not in CONFIG_MAPPING
    return {"trust_remote_code": trust_remote_code, "local_files_only": True}


def _transformer_folder(path: str) -> str:
    """The folder of the transformers checkpoint inside a sentence-transformers model (or the folder itself)."""
    if (Path(path) / "modules.json").is_file():
        for module in _read_json(Path(path) / "modules.json"):
            if module.get("type", "").endswith("Transformer"):
                return str(Path(path) / module.get("path", ""))
    return path


def transformer_config(path: str) -> dict:
    """The transformers config.json of the checkpoint (inside a sentence-transformers folder, its Transformer
    module's), or {} where there is none."""
    config = Path(_transformer_folder(path)) / "config.json"
    return _read_json(config) if config.is_file() else {}


def has_mlm_head(path: str) -> bool:
    """Whether the checkpoint declares a masked-LM head (an `architectures` entry ending in ForMaskedLM), the rule
    sentence-transformers uses to build SPLADE; SEED pretraining folders list SeedEncoderForMaskedLM."""
    architectures = transformer_config(path).get("architectures") or []
    return any(name.endswith("ForMaskedLM") for name in architectures)


def _loading(path: str, build):
    """Run `build()`, turning the loaders' errors about the folder into an InputError naming it."""
    try:
        return build()
    except InputError:
        raise
    except (OSError, ValueError, SafetensorError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InputError(f"{path}: the model in this folder cannot be loaded ({message}).") from None


def _as_plain_bert(model, path: str):
    """`model` with a SEED encoder in its Transformer module swapped for the plain BERT that computes the same."""
    transformer = model[0]
    bert = as_bert(transformer.auto_model)
    if bert is not transformer.auto_model:
        logger.info("%s: SEED encoder loaded as plain %s (the same weights; the weak decoder only pre-trains)",
                    path, type(bert).__name__)
        transformer.model = bert
    return model


def load_sentence_transformer(path: str, pooling: str | None = None, max_seq_length: int | None = None) -> SentenceTransformer:
    """A dense model: a SentenceTransformer folder as saved (its pooling unless `pooling` is given), or a bare
    transformers checkpoint (SEED or BERT-family) as Transformer + Pooling(`pooling`, default [CLS])."""
    kind = model_kind(path)
    if kind == "cross-encoder":
        raise InputError(
            f"{path}: a CrossEncoder, which scores (query, document) pairs but embeds neither, so it cannot retrieve "
            "from a corpus. Use it as a fine-tuning --teacher, or pass a SentenceTransformer or a checkpoint here."
        )
    if kind == "sparse-encoder":
        raise InputError(
            f"{path}: a SparseEncoder (sparse) model, asked for dense retrieval. Evaluate it as a sparse retriever "
            "(pass the folder without 'dense:')."
        )
    hub_kwargs = _hub_kwargs(_transformer_folder(path))
    if kind == "sentence-transformer":
        model = _loading(path, lambda: SentenceTransformer(path, **hub_kwargs))
        if pooling is not None:
            model = _with_pooling(model, pooling, path)
    else:
        def build() -> SentenceTransformer:
            transformer = Transformer(
                path, model_kwargs=hub_kwargs, processor_kwargs=hub_kwargs, config_kwargs=hub_kwargs
            )
            return SentenceTransformer(
                modules=[transformer, Pooling(transformer.get_embedding_dimension(), pooling or DEFAULT_POOLING)]
            )

        model = _loading(path, build)
    model = _as_plain_bert(model, path)
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    return model


def _with_pooling(model: SentenceTransformer, pooling: str, path: str) -> SentenceTransformer:
    modules = list(model)
    positions = [index for index, module in enumerate(modules) if isinstance(module, Pooling)]
    if not positions:
        raise InputError(f"--pooling {pooling}: the model in {path} has no Pooling module to change.")
    old = modules[positions[0]]
    modules[positions[0]] = Pooling(old.embedding_dimension, pooling, include_prompt=old.include_prompt)
    return SentenceTransformer(modules=modules, prompts=model.prompts, similarity_fn_name=model.similarity_fn_name)


def load_sparse_encoder(path: str, max_seq_length: int | None = None) -> SparseEncoder:
    """A SPLADE model: a SparseEncoder folder as saved, or a checkpoint with an MLM head (a SEED pretraining folder,
    BertForMaskedLM) as Transformer(fill-mask) + SpladePooling("max"), built explicitly because sentence-transformers
    silently builds another sparse model for checkpoints it does not recognise as masked LMs."""
    kind = model_kind(path)
    if kind == "sparse-encoder":
        model = _loading(path, lambda: SparseEncoder(path, **_hub_kwargs(_transformer_folder(path))))
    elif kind == "transformers" and has_mlm_head(path):
        hub_kwargs = _hub_kwargs(path)

        def build() -> SparseEncoder:
            transformer = SparseTransformer(
                path, transformer_task="fill-mask",
                model_kwargs=hub_kwargs, processor_kwargs=hub_kwargs, config_kwargs=hub_kwargs,
            )
            return SparseEncoder(modules=[transformer, SpladePooling(pooling_strategy="max")])

        model = _loading(path, build)
    else:
        what = "a dense SentenceTransformer model" if kind == "sentence-transformer" else "a checkpoint"
        raise InputError(
            f"{path}: {what} without a masked-LM head (no config.json 'architectures' entry ending in ForMaskedLM), "
            "asked for sparse retrieval. SPLADE needs the MLM head: pass a SparseEncoder folder or a checkpoint saved "
            "with its MLM head (e.g. a SEED pretraining folder), or evaluate this one as a dense model (without 'sparse:')."
        )
    model = _as_plain_bert(model, path)
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    return model
