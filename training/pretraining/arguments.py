"""Command-line arguments of `training/pretrain.py`, parsed by `HfArgumentParser` next to `TrainingArguments`."""

from dataclasses import dataclass, field

from transformers import TrainingArguments

from ..common.cli import recipe_file_field
from ..common.errors import InputError
from ..common.model_cards import check_hub_model_id
from ..common.trainer_values import RULES, check_trainer_values
from .presets import PRESETS
from .tokenizer import DEFAULT_TOKENIZER_TRAINING_TEXTS

# A fresh decoder behind an already trained encoder learns too slowly at the encoder's gentle rate. Measured from
# splade-tiny on SciFact (encoder at 1e-4, batch 32, 128 tokens, 100 steps): with the decoder at 10x, eval decoder
# loss 7.43 and cls_information 0.050 nats/token; at 1x, 8.12 and 0.004; the MLM loss the same (5.21 / 5.20).
WARM_START_DECODER_LR_FACTOR = 10.0
DEFAULT_EPOCHS, DEFAULT_LEARNING_RATE = 3.0, 5e-4
# CPython's bundled documentation is 1,458 short passages (44 steps an epoch at the default batch). The general
# defaults (132 steps there) leave the model's [CLS] a constant (cls_information 0.0, every pair of dev documents at
# cosine 1.000), which no fine-tuning lifted; 7 epochs at 1e-3 (308 steps: 3 minutes on 2 cores, 5 on one) leave
# cls_information at 0.14-0.15 nats a token (random batches), and the default fine-tuning then improves the model
# (measured; see the README's no-argument chain).
BUNDLED_CORPUS_EPOCHS, BUNDLED_CORPUS_LEARNING_RATE = 7.0, 1e-3
# Its passages are short (median 42 tokens, 6% over 128), so a random batch of 32 almost always holds a long one and
# pads the rest to it: batches of similar lengths made the no-argument job's steps 1.9x faster (one thread), and its
# cls_information 0.096 after the 308 steps (measured; see the README's no-argument chain).
SAMPLING_STRATEGIES = ("random", "sequential", "group_by_length", "batch_rebalance")
BUNDLED_CORPUS_SAMPLING, DEFAULT_SAMPLING = "group_by_length", "random"


@dataclass
class ModelArguments:
    _argument_group_name = "model: shape, weak decoder, warm start, tokenizer"  # its --help heading

    config_name: str | None = field(
        default=None,
        metadata={
            "help": f"Model shape for a new model: a preset ({', '.join(PRESETS)}) or a config.json file or folder. "
            "Defaults to seed-tiny when --model_name_or_path is not given. A preset's vocab_size follows the tokenizer."
        },
    )
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "Local folder to start from: a SEED checkpoint (continued pretraining) or a BERT checkpoint "
            "(model_type 'bert'; warm start: its weights fill the encoder, and the MLM head when it has one; the decoder "
            "is new). Other model types (RoBERTa, XLM-R, ELECTRA, CamemBERT) are refused."
        },
    )
    tokenizer_name: str | None = field(
        default=None,
        metadata={
            "help": "Local tokenizer folder. Defaults to the one in --model_name_or_path; for a new model without one, "
            "a WordPiece tokenizer is trained on the corpus and saved with the model."
        },
    )
    tokenizer_vocab_size: int | None = field(
        default=None,
        metadata={"help": "Vocabulary size of a tokenizer trained on the corpus (default: the config's vocab_size)."},
    )
    tokenizer_training_texts: int = field(
        default=DEFAULT_TOKENIZER_TRAINING_TEXTS,
        metadata={
            "help": "A tokenizer trained on the corpus learns from at most this many of its texts: a sample drawn with "
            "--seed (the first ones of a --streaming corpus), so its time does not grow with the corpus; the card "
            "says how many."
        },
    )
    decoder_num_layers: int | None = field(
        default=None, metadata={"help": "Depth of the weak decoder (config default: 3)."}
    )
    decoder_attention_span: str | None = field(
        default=None,
        metadata={
            "help": "Decoder attention span k: position i sees positions i-k+1..i plus the start position "
            "(config default: 2). 'full' gives an ordinary causal decoder (the paper's strong-decoder ablation)."
        },
    )
    decoder_loss_weight: float | None = field(
        default=None,
        metadata={"help": "lambda in loss = MLM + lambda * reconstruction (config default: 1.0; 0 = MLM only)."},
    )
    mlm_loss_weight: float | None = field(
        default=None,
        metadata={
            "help": "Weight of the MLM term: loss = w * MLM + lambda * reconstruction (config default: 1.0). 0 trains "
            "the decoder alone (the encoder still reads the masked input; the MLM head is kept untrained), the "
            "closest analogue of TSDAE."
        },
    )
    decoder_condition: str | None = field(
        default=None,
        metadata={
            "choices": ["cls", "mean"],
            "help": "The one vector the decoder reads: 'cls', the last layer's [CLS] state (config default, the "
            "paper's), or 'mean', the attention-masked mean of the last layer, for a start that retrieves with mean "
            "pooling (e.g. all-MiniLM-L6-v2).",
        },
    )
    config_overrides: str | None = field(
        default=None,
        metadata={"help": "Other config fields to override, as 'key=value,key=value' (e.g. 'hidden_size=256,num_hidden_layers=6')."},
    )
    base_model: str | None = field(
        default=None,
        metadata={
            "help": "The Hub id of the checkpoint in --model_name_or_path (e.g. sentence-transformers/all-MiniLM-L6-v2), "
            "for the model card's base_model. Default: none there, since the start is a local folder and the Hub "
            "refuses paths in that field; the card's text names the folder."
        },
    )

    def __post_init__(self):
        check_hub_model_id(self.base_model, "--base_model")
        if self.tokenizer_training_texts < 1:
            raise InputError(
                f"--tokenizer_training_texts {self.tokenizer_training_texts}: must be at least 1 (the texts a "
                "vocabulary is learnt from)."
            )


@dataclass
class DataArguments:
    _argument_group_name = "data: corpus files, lengths, masking"  # its --help heading

    train_file: list[str] | None = field(
        default=None,
        metadata={
            "help": "One or more training files, in any mix of: plain text (one passage per line), JSON lines "
            "(text in --text_column; a BEIR corpus.jsonl has title and text joined) or parquet. With neither this "
            "nor --dataset_dir, CPython's bundled documentation (pydoc_data) is used, so the run needs no download."
        },
    )
    dataset_dir: str | None = field(
        default=None, metadata={"help": "A folder written by datasets' save_to_disk (its 'train' split if it has splits)."}
    )
    text_column: str = field(default="text", metadata={"help": "Column (JSON field) that holds the text."})
    max_seq_length: int = field(
        default=128,
        metadata={"help": "Passages are truncated to this many tokens; must not exceed max_position_embeddings."},
    )
    validation_split_percentage: float | None = field(
        default=None,
        metadata={
            "help": "Percentage of the corpus held out to report eval_loss, eval_mlm_loss and eval_decoder_loss "
            "(default 5; 0 disables; not available with --streaming)."
        },
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use only the first N passages (quick experiments and debugging)."}
    )
    streaming: bool = field(
        default=False,
        metadata={
            "help": "Read the corpus as a stream instead of loading it (for corpora larger than memory); each process "
            "reads its own shard. Needs --max_steps."
        },
    )
    preprocessing_num_workers: int | None = field(
        default=None, metadata={"help": "Processes for tokenization (datasets' num_proc)."}
    )
    overwrite_cache: bool = field(default=False, metadata={"help": "Re-tokenize instead of using datasets' cache."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens masked for MLM."})
    whole_word_mask: bool = field(
        default=False, metadata={"help": "Mask all WordPiece pieces of a word together (always with [MASK])."}
    )


@dataclass
class SeedPretrainingArguments(TrainingArguments):
    """`TrainingArguments` with defaults for SEED pretraining; every Trainer flag still applies."""

    _argument_group_name = "training: the Trainer's flags (with our defaults) and the decoder's learning rate"  # its --help heading

    config: str | None = recipe_file_field()
    output_dir: str = field(
        default="seed-encoder",
        metadata={"help": "Where checkpoints and the final model (loadable with AutoModel) are written."},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Replace whatever --output_dir holds. Without it, a folder holding the same model resumes from its "
            "last checkpoint, and one holding a different model is an error."
        },
    )
    per_device_train_batch_size: int = field(default=32, metadata={"help": "Batch size per device for training."})
    per_device_eval_batch_size: int = field(default=32, metadata={"help": "Batch size per device for evaluation."})
    learning_rate: float | None = field(
        default=None,
        metadata={
            "help": f"Peak AdamW learning rate. Default: {DEFAULT_LEARNING_RATE:g}, or {BUNDLED_CORPUS_LEARNING_RATE:g} "
            "on the bundled documentation (no --train_file or --dataset_dir; see --num_train_epochs)."
        },
    )
    num_train_epochs: float | None = field(
        default=None,
        metadata={
            "help": f"Epochs over the corpus (--max_steps overrides it). Default: {DEFAULT_EPOCHS:g}, or "
            f"{BUNDLED_CORPUS_EPOCHS:g} on the bundled documentation, whose 1,458 short passages leave [CLS] collapsed "
            f"after {DEFAULT_EPOCHS:g} epochs at {DEFAULT_LEARNING_RATE:g}."
        },
    )
    decoder_learning_rate: float | None = field(
        default=None,
        metadata={
            "help": "Peak learning rate of the weak decoder's own weights (the word embeddings it shares with the "
            "encoder follow --learning_rate), on the same schedule. Default: --learning_rate, or "
            f"{WARM_START_DECODER_LR_FACTOR:g}x --learning_rate in a warm start from a BERT checkpoint, where "
            "the decoder is new and the encoder is not."
        },
    )
    freeze_encoder: bool = field(
        default=False,
        metadata={
            "help": "Train only the heads: the MLM head's transform and bias and the weak decoder's own weights; the "
            "encoder, its word embeddings included (the heads share them), stays as --model_name_or_path has it. The "
            "first of two runs when the heads are new (a warm start from a SentenceTransformer or a BERT without an "
            "MLM head): they learn to read the encoder before their first, random gradients can reach it. Continue "
            "from this run's --output_dir without the flag (linear probing, then fine-tuning: Kumar et al., 2022). "
            "Needs --model_name_or_path; a frozen encoder trains faster, as nothing flows back through it.",
        },
    )
    anchor_loss_weight: float = field(
        default=0.0,
        metadata={
            "help": "Hold the encoder near where it starts: loss += w * the mean of 1 - cosine between the vector the "
            "decoder reads and the vector a frozen copy of --model_name_or_path's encoder gives the same input, "
            "pooled alike. For continuing a trained retriever, whose vectors MLM and the decoder otherwise pull "
            "together. 0 (default) leaves it out. Needs --model_name_or_path; costs one more forward pass of the "
            "encoder a step, without gradients, and a copy of it in memory.",
        },
    )
    train_sampling_strategy: str | None = field(
        default=None,
        metadata={
            "help": "How training batches are drawn: random, sequential, group_by_length (passages of similar length "
            f"together, so less padding) or batch_rebalance. Default: {DEFAULT_SAMPLING}, or {BUNDLED_CORPUS_SAMPLING} "
            "on the bundled documentation, where random batches of its short passages are mostly padding. Ignored "
            "with --streaming.",
            "choices": list(SAMPLING_STRATEGIES),
        },
    )
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay."})
    warmup_steps: float = field(
        default=0.06, metadata={"help": "Warm-up: a number of steps, or a fraction of all steps when below 1."}
    )
    logging_steps: float = field(default=10, metadata={"help": "Log the losses every N steps."})
    logging_first_step: bool = field(
        default=True, metadata={"help": "Also log the losses of the first step (the start of the loss curves)."}
    )
    save_steps: float = field(default=100, metadata={"help": "Save a resumable checkpoint every N steps."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Keep at most this many checkpoints."})
    remove_unused_columns: bool = field(
        default=False,
        metadata={"help": "Keep the tokenized columns the masking collator needs (special_tokens_mask, offsets)."},
    )

    def __post_init__(self):
        check_trainer_values(self, RULES | {"decoder_learning_rate": ("above 0", lambda value: value > 0)})
        super().__post_init__()
