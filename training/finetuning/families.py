"""Dense and sparse retrievers: everything fine-tuning does differently for the two, in one place.

The pipeline (data, negatives, teachers, rounds, resume, card) is the same for both; a family
says how to load the starting model, which trainer trains it, and how its training loss is composed.
"""

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sentence_transformers import SentenceTransformerTrainer, SparseEncoderTrainer

from ..common.errors import InputError
from ..common.models import has_mlm_head, load_sentence_transformer, load_sparse_encoder, model_kind
from ..common.sparse_encoding import tiled_splade_training
from ..evaluation.retrievers.faiss_index import EXACT
from .arguments import OWN_SCALE, SIMILARITY_SCALE, FinetuningModelArguments, RecipeArguments
from .losses import SparseRegularisation, build_loss

# Longest input when neither the user nor the starting model says otherwise.
DEFAULT_MAX_SEQ_LENGTH = 256


@dataclass(frozen=True)
class RetrieverFamily:
    name: str  # the sentence-transformers class the output folder loads as
    sparse: bool

    def load_as_served(self, path: str, model_args: FinetuningModelArguments):
        """The model in `path` (a starting checkpoint, or a finished round's folder) at its own maximum input length:
        the one `SentenceTransformer(path)` / `SparseEncoder(path)` gives it, and so the one its users serve it at."""
        if self.sparse:
            model = load_sparse_encoder(path)
        else:
            model = load_sentence_transformer(path, pooling=model_args.pooling)
        model.model_card_data.local_files_only = True  # no Hub lookups for dataset or base-model ids
        return model

    def load(self, path: str, model_args: FinetuningModelArguments):
        """The model in `path`, to train: at the training length (`training_length`)."""
        model = self.load_as_served(path, model_args)
        model.max_seq_length = training_length(model_args, model.max_seq_length)
        return model

    def trainer(self, **kwargs):
        return (SparseEncoderTrainer if self.sparse else SentenceTransformerTrainer)(**kwargs)

    def training(self, trainer) -> AbstractContextManager:
        """What `trainer.train()` runs inside: for a sparse model, SPLADE pooling without its [batch, length,
        vocabulary] logits (on the CPU). Not with sharded parameters (FSDP, DeepSpeed), whose vocabulary projection
        is gathered only inside the module that owns it."""
        if self.sparse and not (trainer.is_fsdp_enabled or trainer.is_deepspeed_enabled):
            return tiled_splade_training(trainer.model)
        return nullcontext()

    def loss(self, model, recipe: RecipeArguments, model_args: FinetuningModelArguments):
        regularisation = None
        if self.sparse:
            regularisation = SparseRegularisation(model_args.query_regularizer_weight, model_args.document_regularizer_weight)
        return build_loss(model, recipe, regularisation)

    def teacher_label_scale(self, recipe: RecipeArguments, own_scores: Callable[[], np.ndarray]) -> float:
        """What the round's standardised teacher scores are multiplied by to be on the student's scale. A dense
        student's logits are cosines x similarity_scale: 1 / that scale. A sparse student's dot products have no fixed
        scale (splade-tiny's spread over SciFact training pairs is about 16, against a standardised teacher's 1), so
        the spread (standard deviation) of `own_scores()`, the student's own scores of the round's pairs: then
        distillation reshapes its ranking instead of first shrinking every score towards the teacher's units."""
        if (recipe.teacher_label_scale or self.default_label_scale()) == SIMILARITY_SCALE:
            return 1.0 / recipe.similarity_scale
        return float(np.std(own_scores())) or 1.0

    def default_label_scale(self) -> str:
        """`--teacher_label_scale` when not given, by the student's family alone, never by its data: the student's own
        spread for a sparse student, whose dot products have no fixed scale; one cosine unit for a dense one. (The
        label-free recipe names `own` for a dense student: its teacher margins, BM25's and the start's, would arrive
        a fraction of the start's own, whose cosine margins spread about 4 times 1 / similarity_scale.)"""
        return OWN_SCALE if self.sparse else SIMILARITY_SCALE

    def describe(self, model) -> str:
        if self.sparse:
            return f"SPLADE: {type(model[0]).__name__} (MLM head) + max pooling of log(1 + ReLU(logits)), max {model.max_seq_length} tokens"
        return f"{type(model[0]).__name__} + {model[1].pooling_mode} pooling, max {model.max_seq_length} tokens"


def training_length(model_args: FinetuningModelArguments, own: int | None) -> int:
    """The length inputs are truncated at in training: --max_seq_length, else the model's `own`, at most 256."""
    return model_args.max_seq_length or min(own or DEFAULT_MAX_SEQ_LENGTH, DEFAULT_MAX_SEQ_LENGTH)


def published_length(model_args: FinetuningModelArguments, served: int | None, training: int) -> int:
    """The length the published model truncates at, and every model of the run is judged at on dev:
    --published_max_seq_length, else the length the start is `served` at (a SentenceTransformer or SparseEncoder
    folder's own, from its sentence_bert_config.json), else the `training` length. Not the training length where the
    start is served at another: a start served at 256 tokens and published at a training length of 128 loses by
    truncation alone (all-MiniLM-L6-v2 on SciFact: 0.645 at 256 tokens, 0.624 at 128). A bare checkpoint is served
    by nobody yet, and its positions past its pre-training length (a SEED folder pre-trained at 128 tokens has 512)
    may never have been trained: it is published at the length fine-tuning taught it."""
    return model_args.published_max_seq_length or served or training


SERVED_KINDS = ("sentence-transformer", "sparse-encoder")  # folders that say the length they are served at


@dataclass(frozen=True)
class Lengths:
    """The longest input in tokens while training, and of the published model and every dev evaluation."""

    training: int
    published: int


def served_and_trained_lengths(model_args, start) -> Lengths:
    """The run's training and published lengths, from the flags and the `start` as loaded, at its own length."""
    training = training_length(model_args, start.max_seq_length)
    served = start.max_seq_length if model_kind(model_args.model_name_or_path) in SERVED_KINDS else None
    return Lengths(training, published_length(model_args, served, training))


def check_published_length(length: int, model) -> None:
    """Refuse a published length beyond the positions the start's transformer has, before any work."""
    positions = getattr(model[0].auto_model.config, "max_position_embeddings", None)
    if positions is not None and length > positions:
        raise InputError(
            f"--published_max_seq_length {length}: the start's transformer has {positions} positions; pass at most that."
        )


DENSE = RetrieverFamily(name="SentenceTransformer", sparse=False)
SPARSE = RetrieverFamily(name="SparseEncoder", sparse=True)


def check_dense_only_flags(family: RetrieverFamily, recipe: RecipeArguments, data_args) -> None:
    """Refuse, before any work, the flags that only a dense model's search reads when the run trains a SparseEncoder."""
    if not family.sparse:
        return
    if recipe.mining_index != EXACT:
        raise InputError(
            f"--mining_index {recipe.mining_index} is a dense (faiss) index; a --sparse model mines from its exact "
            "inverted index: drop --mining_index."
        )
    if data_args.embedding_dtype != "float32":
        raise InputError(
            f"--embedding_dtype {data_args.embedding_dtype} applies to dense embeddings; a --sparse model keeps "
            "float32 CSR matrices: drop --embedding_dtype."
        )


def retriever_family(model_args: FinetuningModelArguments) -> RetrieverFamily:
    """The family `--sparse` asks for, after checking the starting checkpoint can be one."""
    if not model_args.sparse:
        return DENSE
    path = model_args.model_name_or_path
    if Path(path).is_dir() and model_kind(path) != "sparse-encoder" and not has_mlm_head(path):
        raise InputError(
            f"--sparse --model_name_or_path {path}: the checkpoint has no masked-LM head, and SPLADE scores the "
            "vocabulary with it. Start from a SEED pretraining folder, a BERT-family checkpoint saved with its MLM head "
            "(config.json architectures ending in ForMaskedLM, e.g. BertForMaskedLM) or a SparseEncoder folder; a "
            "SentenceTransformer such as all-MiniLM-L6-v2 or a bare BertModel has none."
        )
    return SPARSE

