"""Command-line arguments of `training/finetune.py`, parsed by `HfArgumentParser` next to
sentence-transformers' training arguments. Each dataclass checks its own fields."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sentence_transformers import SentenceTransformerTrainingArguments, SparseEncoderTrainingArguments
from sentence_transformers.base.sampler import BatchSamplers

from ..common.cli import recipe_file_field
from ..common.errors import InputError
from ..common.model_cards import check_hub_model_id
from ..common.trainer_values import check_trainer_values
from ..evaluation.embedding_cache import cache_dir_or_none, default_cache_dir
from ..evaluation.retrievers.faiss_index import DEFAULT_NPROBE, EXACT, INDEX_KINDS
from .pseudo_queries import CROPS, PSEUDO_QUERY_KINDS, TITLES

OWN_SCALE, SIMILARITY_SCALE = "own", "similarity_scale"

NEGATIVE_SOURCES = ("none", "bm25", "self", "model")
# The sources that re-mine from the model being trained before a later round.
REMINING_SOURCES = ("self", "model")
# The learning rate for trained checkpoints (all-MiniLM-L6-v2, splade-tiny). A small SEED-Encoder pre-trained for
# minutes is far from converged: at 2e-5 the default fine-tuning left the seed-tiny chain's dev nDCG@10 where it
# was (0.226 -> 0.221 after a round), at 5e-4 it rose (see docs/finetuning.md, the no-argument chain).
TRAINED_START_LEARNING_RATE, SMALL_SEED_LEARNING_RATE, SMALL_SEED_HIDDEN_SIZE = 2e-5, 5e-4, 256
DISTILLATION_LOSSES = ("margin_mse", "kl")


@dataclass
class FinetuningModelArguments:
    _argument_group_name = "model: the start, its pooling and lengths, SPLADE, the card"  # its --help heading

    model_name_or_path: str = field(
        default="seed-encoder",
        metadata={
            "help": "Local folder to start from: a SEED pretraining folder (its encoder), any BERT-family checkpoint, "
            "or a SentenceTransformer folder such as all-MiniLM-L6-v2. Default: ./seed-encoder, what "
            "`accelerate launch training/pretrain.py` writes."
        },
    )
    candidate_starts: list[str] | None = field(
        default=None,
        metadata={
            "help": "Other folders the run may start from, such as the retriever that --model_name_or_path was adapted "
            "from (training/pretrain.py, then this script). Each is scored on the dev split beside "
            "--model_name_or_path before training; the run trains the best of them (--model_name_or_path wins a tie) "
            "and publishes a round only where it beats that start, so it never publishes a model that its dev split "
            "found worse than any of them. The --learning_rate default and the 'start' teacher still follow "
            "--model_name_or_path. Default: none, the run starts from --model_name_or_path."
        },
    )
    pooling: str | None = field(
        default=None,
        metadata={
            "help": "cls (the SEED paper's choice) or mean. Default: a SentenceTransformer folder keeps its own pooling, "
            "any other folder gets cls."
        },
    )
    max_seq_length: int | None = field(
        default=None,
        metadata={
            "help": "Longest input in tokens while training, queries and documents (default: the starting model's, at "
            "most 256). Not the published model's: see --published_max_seq_length."
        },
    )
    published_max_seq_length: int | None = field(
        default=None,
        metadata={
            "help": "Longest input in tokens of the published model, and of every dev evaluation that decides which "
            "model is published (the start's and each round's), so that the run compares what it publishes with the "
            "start as its users serve it. Default: the length a SentenceTransformer or SparseEncoder --model_name_or_path "
            "is served at (its sentence_bert_config.json), whatever length the run trains at; for a bare checkpoint "
            "(a SEED pretraining folder, BERT), which nobody serves yet, the training length."
        },
    )

    sparse: bool = field(
        default=False,
        metadata={
            "help": "Train a SPLADE SparseEncoder on the checkpoint's MLM head (max pooling of log(1 + ReLU(logits))) "
            "instead of a dense SentenceTransformer. Needs a checkpoint with an MLM head, e.g. a SEED pretraining folder."
        },
    )
    query_regularizer_weight: float = field(
        default=5e-5, metadata={"help": "With --sparse: weight of the FLOPS regulariser on query vectors."}
    )
    document_regularizer_weight: float = field(
        default=3e-5, metadata={"help": "With --sparse: weight of the FLOPS regulariser on document vectors."}
    )
    language: list[str] = field(
        default_factory=lambda: ["en"],
        metadata={"help": "Language(s) of the training text, for the model card, as ISO 639-1 codes (default: en)."},
    )
    base_model: str | None = field(
        default=None,
        metadata={
            "help": "--model_name_or_path's Hub id (e.g. sentence-transformers/all-MiniLM-L6-v2), for the model card's "
            "base_model (left out where --candidate_starts chose another start). Default: none there, since the start "
            "is a local folder and the Hub refuses paths in that field; the card's text names the folder."
        },
    )
    license: str | None = field(
        default=None,
        metadata={
            "help": "Licence of the fine-tuned model for the model card, as a Hub licence id (e.g. apache-2.0, mit, "
            "cc-by-4.0). Default: the starting checkpoint's (with --candidate_starts, the one chosen), from its model "
            "card; the training data's terms may call for another: check them."
        },
    )

    def __post_init__(self):
        if self.sparse and self.pooling is not None:
            raise InputError("--pooling applies to dense models; a --sparse model max-pools its vocabulary scores.")
        if self.query_regularizer_weight < 0 or self.document_regularizer_weight < 0:
            raise InputError("--query_regularizer_weight and --document_regularizer_weight must be >= 0.")
        if self.pooling is not None and self.pooling not in ("cls", "mean"):
            raise InputError(f"--pooling {self.pooling}: expected cls or mean.")
        for flag, length in (("--max_seq_length", self.max_seq_length), ("--published_max_seq_length", self.published_max_seq_length)):
            if length is not None and length < 8:
                raise InputError(f"{flag} {length}: too short for a query or a passage (at least 8).")
        check_hub_model_id(self.base_model, "--base_model")
        if self.candidate_starts and self.model_name_or_path in self.candidate_starts:
            raise InputError(
                f"--candidate_starts {self.model_name_or_path}: that is --model_name_or_path already; name only the "
                "other folders the run may start from."
            )


@dataclass
class FinetuningDataArguments:
    # its --help heading: the data source is named by its flag, and nothing else changes with it
    _argument_group_name = (
        "data: one source, --data_dir (judged queries), --train_file (pairs) or --corpus_file (label-free; the "
        "recipe: recipes/finetune_label_free.yaml)"
    )

    data_dir: str | None = field(
        default=None,
        metadata={
            "help": "A BEIR-layout folder (corpus.jsonl, queries.jsonl, qrels/train.tsv): trains on the train split; "
            "model selection on qrels/dev.tsv when present, else on --dev_fraction of the training queries."
        },
    )
    train_file: str | None = field(
        default=None,
        metadata={"help": "JSON lines with 'query', 'positive' and optional 'negatives' (a list of texts)."},
    )
    corpus_file: list[str] | None = field(
        default=None,
        metadata={
            "help": "Label-free: passages alone, each making a pseudo-query of a kind of --pseudo_queries (default: "
            "two independent random crops of one passage are a positive pair, Contriever-style). Text, JSON lines "
            "(--text_column) or parquet, as for pretraining. Default, where no source is named: the bundled corpus "
            "the pretraining default uses (the no-argument chain)."
        },
    )
    text_column: str = field(default="text", metadata={"help": "JSON field or column of --corpus_file holding the text."})
    pseudo_queries: list[str] = field(
        default_factory=lambda: [CROPS],
        metadata={
            "help": "With --corpus_file or the bundled corpus: the kinds of pseudo-query each passage may make, one a "
            "passage, drawn among those it allows when several are given. crops: two independent random crops "
            "(Contriever); sentences: one sentence as the query, cut from the passage it must find 90%% of the time "
            "(Inverse Cloze Task); titles: a JSON-lines record's --title_column as the query of its text; leads: a "
            "passage's first sentence, cut as a sentence is (where a corpus has no titles, the sentence most often "
            "saying what the passage is about).",
            "choices": list(PSEUDO_QUERY_KINDS),
        },
    )
    dev_pseudo_queries: list[str] | None = field(
        default=None,
        metadata={
            "help": "The kinds of pseudo-query the held-out passages make for the dev split that picks the published "
            "model (the start or a round), when they should differ from --pseudo_queries: e.g. train on titles and "
            "judge on sentences, since the start already finds a title's own text almost every time, so a title dev "
            "split cannot tell a better round from it. Default: the kinds of --pseudo_queries.",
            "choices": list(PSEUDO_QUERY_KINDS),
        },
    )
    dev_data_dir: str | None = field(
        default=None,
        metadata={
            "help": "Without --data_dir: a BEIR-layout folder (corpus.jsonl, queries.jsonl, qrels/--dev_split.tsv) of "
            "real queries with judgments, on which the run decides whether a round beats the start, instead of "
            "held-out pseudo-queries or pairs. Training stays label-free; a pseudo-dev can prefer a round that loses "
            "on real queries unlike its pseudo-queries, and a few dozen judged queries tell more (docs/label_free.md)."
        },
    )
    dev_split: str = field(default="dev", metadata={"help": "With --dev_data_dir: the qrels file that judges (default: dev)."})
    title_column: str = field(
        default="title",
        metadata={"help": "JSON field of --corpus_file holding a passage's title (--pseudo_queries titles, or the dev's)."},
    )
    max_train_queries: int | None = field(
        default=None,
        metadata={
            "help": "Few-shot: train on N training queries (with unsupervised pairs: N passages) drawn with --seed "
            "(all their positives kept)."
        },
    )
    dev_fraction: float = field(
        default=0.1,
        metadata={"help": "Share of the training queries held out for model selection when there is no dev split."},
    )
    eval_split: str | None = field(
        default=None,
        metadata={"help": "Also evaluate the final model on this split of --data_dir (e.g. test) for the model card."},
    )
    skip_unknown_ids: bool = field(
        default=False, metadata={"help": "Drop qrels lines whose query or document id does not exist, instead of stopping."}
    )
    cache_dir: str | None = field(
        default_factory=default_cache_dir,
        metadata={
            "help": "Where the run keeps each model's encoding of the corpus (the start's, each round's), keyed by its "
            "weights, tokenizer and modules and the corpus: the one cache training/evaluate.py uses, so a start it "
            "has already evaluated, or another run from the same start, is not encoded again (default: "
            "$XDG_CACHE_HOME or ~/.cache, then seed-encoder/embeddings); 'none' keeps nothing."
        },
    )

    embedding_dtype: Literal["float32", "float16"] = field(
        default="float32",
        metadata={
            "help": "How a dense model's corpus embeddings are stored in --cache_dir (and in memory before "
            "indexing) for dev evaluation and mining: float16 halves them; they are searched as float32."
        },
    )

    def __post_init__(self):
        self.cache_dir = cache_dir_or_none(self.cache_dir)
        if self.data_dir and self.train_file:
            raise InputError("--data_dir and --train_file are two sources of training pairs: pass one of them.")
        if self.corpus_file and (self.data_dir or self.train_file):
            raise InputError(
                "--corpus_file builds unsupervised pairs and is used only without --data_dir or --train_file; "
                "drop one of them."
            )
        self.pseudo_queries = self._pseudo_query_kinds("--pseudo_queries", self.pseudo_queries, default=[CROPS])
        if self.dev_pseudo_queries is not None:
            self.dev_pseudo_queries = self._pseudo_query_kinds("--dev_pseudo_queries", self.dev_pseudo_queries)
        if self.dev_data_dir and not Path(self.dev_data_dir).is_dir():
            raise InputError(f"--dev_data_dir {self.dev_data_dir}: no such folder. Pass a BEIR-layout folder with judged queries.")
        if self.dev_data_dir and self.data_dir:
            raise InputError(
                f"--dev_data_dir {self.dev_data_dir}: --data_dir {self.data_dir} brings its own dev split (qrels/dev.tsv, "
                "else held-out training queries); drop --dev_data_dir."
            )
        if self.eval_split and not self.data_dir:
            raise InputError(f"--eval_split {self.eval_split} needs --data_dir, the collection it is a split of.")
        if not 0 < self.dev_fraction < 1:
            raise InputError(f"--dev_fraction {self.dev_fraction}: must be between 0 and 1.")
        if self.max_train_queries is not None and self.max_train_queries < 1:
            raise InputError(f"--max_train_queries {self.max_train_queries}: must be at least 1.")

    def _pseudo_query_kinds(self, flag: str, kinds: list[str], default: list[str] | None = None) -> list[str]:
        """The kinds `flag` names, each once; refused beside real queries (unless left at `default`), empty, or
        titles without a corpus file to read them from."""
        if kinds != default and (self.data_dir or self.train_file):
            raise InputError(
                f"{flag} {' '.join(kinds)}: pseudo-queries are made from a corpus alone (--corpus_file), not from "
                "--data_dir or --train_file, whose queries are real; drop one of them."
            )
        if not kinds:
            raise InputError(f"{flag}: give at least one of {', '.join(PSEUDO_QUERY_KINDS)}.")
        if TITLES in kinds and not self.corpus_file:
            raise InputError(
                f"{flag} titles needs --corpus_file, JSON lines whose records have a title (--title_column); "
                "the bundled corpus has none."
            )
        return list(dict.fromkeys(kinds))


@dataclass
class RecipeArguments:
    _argument_group_name = "recipe: negatives, rounds, teachers and distillation"  # its --help heading

    negatives: str = field(
        default="self",
        metadata={
            "help": "Hard negatives: self (ANCE-style, the default: BM25 in the first round, then re-mined from the "
            "current model's own index before each later round), model (the current model's own index before every "
            "round, the first included: GPL's dense mining, for a start that already retrieves well), bm25 (mined "
            "once before training), or none (in-batch negatives only; a --train_file's own negatives are used when it "
            "has them)."
        },
    )
    negatives_per_query: int = field(default=1, metadata={"help": "Mined negatives per training pair."})
    negatives_range_min: int = field(
        default=10,
        metadata={
            "help": "Skip the top N ranks when mining: unjudged positives sit there and must not be taught as negatives."
        },
    )
    negatives_range_max: int = field(default=50, metadata={"help": "Mine negatives from ranks up to N."})
    mining_index: str = field(
        default="exact",
        metadata={
            "help": "How --negatives self or model searches the model's own index of the corpus: exact (every "
            "document, the default) or ivf (a faiss inverted file of 4·sqrt(N) lists, --mining_nprobe of them searched "
            "a query: for corpora of millions, where exact search per query grows with N; its recall@100 against exact "
            "is in benchmarks/records/scale.md). Evaluation is always exact. Either runs on all GPUs faiss sees."
        },
    )
    mining_nprobe: int = field(
        default=DEFAULT_NPROBE,
        metadata={
            "help": "With --mining_index ivf: lists searched a query (more: slower, closer to exact). At 1M passages "
            "the default found 0.94 of exact search's top 100 at a quarter of its time, 512 found 0.99 at 3x the "
            "default's time; raise it for larger corpora."
        },
    )
    mining_rounds: int | None = field(
        default=None,
        metadata={
            "help": "Training rounds; with --negatives self or model, negatives are re-mined before each later one. "
            "Default: 2 with --negatives self, else 1."
        },
    )
    teacher: list[str] | None = field(
        default=None,
        metadata={
            "help": "Distillation teachers: bm25, start (the starting checkpoint itself, frozen, scoring as the "
            "student does: a label-free run cannot drift where it does not follow), local SentenceTransformer, "
            "SparseEncoder or CrossEncoder folders, or "
            "transformers checkpoints as sparse:PATH (SPLADE over the MLM head, e.g. splade-tiny) or dense:PATH. "
            "Several form an ensemble (each teacher's scores standardised over all the round's pairs, then averaged, as "
            "SPLADE++'s EnsembleDistil)."
        },
    )
    distillation: str = field(
        default="margin_mse", metadata={"help": "With --teacher: margin_mse (MarginMSE) or kl (KL divergence)."}
    )
    teacher_label_scale: str | None = field(
        default=None,
        metadata={
            "help": "With --teacher: what the standardised teacher scores are multiplied by to be on the student's "
            "scale. own: the spread (standard deviation) of the student's own scores of the round's pairs, so "
            "distillation reshapes its ranking rather than first shrinking or stretching every margin (the default "
            "of sparse students; recipes/finetune_label_free.yaml names it for dense ones); similarity_scale: "
            "1 / --similarity_scale, one fixed cosine unit (the default of dense students).",
            "choices": [OWN_SCALE, SIMILARITY_SCALE],
        },
    )
    mini_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "Use the cached (GradCache) in-batch loss, encoding this many texts at a time: large batches in "
            "little memory."
        },
    )
    similarity_scale: float = field(
        default=20.0, metadata={"help": "Inverse temperature of the in-batch softmax over cosine similarities."}
    )

    def __post_init__(self):
        if self.negatives not in NEGATIVE_SOURCES:
            raise InputError(f"--negatives {self.negatives}: expected one of {', '.join(NEGATIVE_SOURCES)}.")
        if self.distillation not in DISTILLATION_LOSSES:
            raise InputError(f"--distillation {self.distillation}: expected one of {', '.join(DISTILLATION_LOSSES)}.")
        if self.mining_index not in INDEX_KINDS:
            raise InputError(f"--mining_index {self.mining_index}: expected one of {', '.join(INDEX_KINDS)}.")
        if self.mining_index != EXACT and self.negatives not in REMINING_SOURCES:
            raise InputError(
                f"--mining_index {self.mining_index} searches the model's own index, which only --negatives self or "
                f"model mines from (--negatives {self.negatives} does not): drop the flag or change --negatives."
            )
        if self.mining_nprobe < 1:
            raise InputError(f"--mining_nprobe {self.mining_nprobe}: must be at least 1.")
        if self.mining_rounds is None:
            self.mining_rounds = 2 if self.negatives == "self" else 1
        if self.mining_rounds < 1:
            raise InputError(f"--mining_rounds {self.mining_rounds}: must be at least 1.")
        if self.mining_rounds > 1 and self.negatives not in REMINING_SOURCES:
            raise InputError(
                f"--mining_rounds {self.mining_rounds} re-mines negatives with the model being trained, which only "
                "--negatives self or model does; pass one of them, or one round."
            )
        if self.negatives_per_query < 1:
            raise InputError(f"--negatives_per_query {self.negatives_per_query}: must be at least 1.")
        if not 0 <= self.negatives_range_min < self.negatives_range_max:
            raise InputError(
                f"--negatives_range_min {self.negatives_range_min} / --negatives_range_max {self.negatives_range_max}: "
                "need 0 <= min < max."
            )
        if self.negatives_range_max - self.negatives_range_min < self.negatives_per_query:
            raise InputError(
                f"Ranks {self.negatives_range_min}..{self.negatives_range_max} cannot give --negatives_per_query "
                f"{self.negatives_per_query} negatives; widen the range."
            )
        if self.teacher and self.negatives == "none":
            raise InputError(
                "--teacher distils the teacher's scores of (query, positive, negatives), which needs hard negatives: "
                "pass --negatives bm25, self or model."
            )
        if self.teacher_label_scale and not self.teacher:
            raise InputError(f"--teacher_label_scale {self.teacher_label_scale} scales a teacher's scores: pass --teacher.")
        if self.teacher and self.mini_batch_size is not None:
            raise InputError("--mini_batch_size applies to the in-batch loss; distillation (--teacher) does not use it.")


@dataclass
class SeedFinetuningArguments(SentenceTransformerTrainingArguments, SparseEncoderTrainingArguments):
    """sentence-transformers' training arguments with defaults for retrieval fine-tuning; every Trainer flag applies.

    Both trainers accept it (neither class adds fields to their common base), so dense and sparse runs
    parse the same flags."""

    _argument_group_name = "training: the Trainer's and sentence-transformers' flags (with our defaults)"  # its --help heading

    config: str | None = recipe_file_field()
    output_dir: str = field(
        default="seed-encoder-st",
        metadata={"help": "Where rounds, checkpoints and the final SentenceTransformer are written."},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Replace whatever --output_dir holds. Without it, a folder holding the same run resumes, and one "
            "holding a different model is an error."
        },
    )
    per_device_train_batch_size: int = field(default=32, metadata={"help": "Training pairs per device and step."})
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "Texts per encoding batch in evaluation."})
    learning_rate: float | None = field(
        default=None,
        metadata={
            "help": f"Peak AdamW learning rate. Default: {TRAINED_START_LEARNING_RATE:g}, or {SMALL_SEED_LEARNING_RATE:g} "
            f"for a SEED-Encoder pretraining folder narrower than {SMALL_SEED_HIDDEN_SIZE} (the default seed-tiny, "
            f"pre-trained here for minutes), which {TRAINED_START_LEARNING_RATE:g} leaves where it started (measured)."
        },
    )
    num_train_epochs: float = field(default=2.0, metadata={"help": "Epochs over the training pairs in each round."})
    warmup_steps: float = field(
        default=0.1, metadata={"help": "Warm-up: a number of steps, or a fraction of a round's steps when below 1."}
    )
    logging_steps: float = field(default=5, metadata={"help": "Log the training loss every N steps."})
    logging_first_step: bool = field(default=True, metadata={"help": "Also log the first step's loss."})
    eval_strategy: str = field(
        default="no",
        metadata={
            "help": "When to evaluate on the dev split within a round: no, steps (--eval_steps) or epoch. The dev split "
            "is always evaluated before training and at the end of every round (which picks the final model); each "
            "evaluation encodes the whole corpus."
        },
    )
    save_strategy: str = field(default="steps", metadata={"help": "When to save resumable checkpoints: steps or epoch."})
    save_steps: float = field(default=50, metadata={"help": "Save a resumable checkpoint every N steps."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Keep at most this many checkpoints per round."})
    batch_sampler: BatchSamplers = field(
        default=BatchSamplers.NO_DUPLICATES,
        metadata={"help": "no_duplicates keeps a text from appearing twice in a batch, where it would be its own negative."},
    )

    def __post_init__(self):
        check_trainer_values(self)
        super().__post_init__()
