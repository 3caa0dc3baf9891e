"""SEED-Encoder pretraining with the standard `Trainer`: the library function behind `training/pretrain.py`."""

import logging
import os
from pathlib import Path

from datasets import Dataset, IterableDataset
from transformers import PreTrainedTokenizerFast, set_seed
from transformers.integrations import is_deepspeed_zero3_enabled
from transformers.utils import strtobool

import modeling_seed  # noqa: F401  (registers SEED with the Auto classes in every process)
from modeling_seed import DataCollatorForSeedPretraining, SeedEncoderForPreTraining

from ..data.corpus import check_train_files, load_raw_corpus, shared_out_by_example
from ..common.distributed import on_main_process
from ..common.errors import InputError
from ..common.output_dir import (
    FINISHED_MARKER,
    ExistingRun,
    clear_output_dir,
    find_existing_run,
    output_dir_lock,
    publish_final_model,
    push_final_model,
    staging_dir,
)
from ..common.resuming import train_or_restore
from .arguments import (
    BUNDLED_CORPUS_EPOCHS,
    BUNDLED_CORPUS_LEARNING_RATE,
    BUNDLED_CORPUS_SAMPLING,
    DEFAULT_EPOCHS,
    DEFAULT_LEARNING_RATE,
    DEFAULT_SAMPLING,
    WARM_START_DECODER_LR_FACTOR,
    DataArguments,
    ModelArguments,
    SeedPretrainingArguments,
)
from .model_card import LOSS_PLOT, plot_loss_curves, render_model_card
from .model_source import ModelSource, check_lengths, check_same_model, check_vocabulary, resolve_model_source
from .sentence_transformer_start import write_sentence_transformer_modules
from .tokenizer import load_tokenizer, tokenize_corpus, tokenizer_training_texts, train_wordpiece_tokenizer
from .trainer import SeedPretrainingTrainer, check_same_frozen_encoder, finished_at

logger = logging.getLogger(__name__)


def _describe_data(data_args: DataArguments) -> str:
    if data_args.dataset_dir:
        return f"`{data_args.dataset_dir}` (datasets save_to_disk folder)"
    if data_args.train_file:
        return ", ".join(f"`{Path(name).name}`" for name in data_args.train_file)
    return "CPython's bundled reference documentation (`pydoc_data.topics`), the no-download default corpus"


def check_flags_that_hold_the_start(training_args: SeedPretrainingArguments, start: str | None) -> None:
    """Refuse --freeze_encoder without a trained start, and an --anchor_loss_weight that cannot hold anything:
    negative, without a trained start, with the encoder frozen, with DeepSpeed ZeRO-3 (whose partitioned weights a
    copy would not hold) or with FSDP's CPU-RAM-efficient loading (where every process but the first holds no weights
    to copy until FSDP sends them)."""
    if training_args.freeze_encoder and start is None:
        raise InputError(
            "--freeze_encoder keeps the encoder as it starts, and a new model's encoder is random: pass "
            "--model_name_or_path with the trained encoder whose new heads should learn to read it."
        )
    weight = training_args.anchor_loss_weight
    if weight < 0:
        raise InputError(f"--anchor_loss_weight {weight}: must be 0 (off) or positive.")
    if weight == 0:
        return
    if start is None:
        raise InputError(
            "--anchor_loss_weight holds the encoder near where it starts, and a new model's encoder is random: pass "
            "--model_name_or_path with the trained encoder to hold it near, or leave --anchor_loss_weight out."
        )
    if training_args.freeze_encoder:
        raise InputError(
            "--anchor_loss_weight with --freeze_encoder: a frozen encoder stays where it starts already; pass one flag "
            "or the other."
        )
    if is_deepspeed_zero3_enabled():
        raise InputError(
            "--anchor_loss_weight is not available with DeepSpeed ZeRO-3: its copy of the starting encoder would hold "
            "partitioned weights. Use ZeRO-2, FSDP or DDP."
        )
    if fsdp_loads_weights_on_the_first_process_only():
        raise InputError(
            "--anchor_loss_weight is not available with FSDP's fsdp_cpu_ram_efficient_loading: every process but the "
            "first builds the model without weights, so its copy of the starting encoder would be empty. Set "
            "fsdp_cpu_ram_efficient_loading: false in the Accelerate config (as training/configs/"
            "accelerate_fsdp_bf16.yaml does)."
        )


def fsdp_loads_weights_on_the_first_process_only() -> bool:
    """Whether Accelerate's FSDP config asks for CPU-RAM-efficient loading, read from the environment `accelerate
    launch` (or the Trainer's `fsdp_config`) sets, as transformers' `from_pretrained` reads it."""
    return all(strtobool(os.environ.get(name, "false")) for name in ("ACCELERATE_USE_FSDP", "FSDP_CPU_RAM_EFFICIENT_LOADING"))


def run_pretraining(
    model_args: ModelArguments, data_args: DataArguments, training_args: SeedPretrainingArguments
) -> Path:
    """Pre-train a SEED-Encoder and write it to `training_args.output_dir`; returns that folder.

    Only one run at a time writes to the folder, every input is checked before anything is
    written, a run interrupted at any point resumes from its last whole checkpoint, and the final
    model appears in the folder only once it is complete.
    """
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        level=logging.INFO if training_args.should_log else logging.WARNING,
    )
    with output_dir_lock(training_args.output_dir, is_main_process=training_args.process_index == 0):
        _pretrain(model_args, data_args, training_args)
    return Path(training_args.output_dir)


def _pretrain(model_args: ModelArguments, data_args: DataArguments, training_args: SeedPretrainingArguments) -> None:
    validation_percentage = _check_data_flags(data_args, training_args)
    _fill_defaults_for_the_corpus(data_args, training_args)
    source = _resolve_start(model_args, data_args, training_args)
    raw_corpus = _load_corpus(data_args, training_args)
    existing = _inspect_output_dir(training_args)
    tokenizer, tokenizer_origin = _settle_tokenizer(model_args, data_args, training_args.seed, source, existing, raw_corpus)
    if existing is not None and _already_finished(training_args, existing, source.config):
        return
    resume_from = _checkpoint_to_resume(training_args, existing)
    model = _build_model(training_args, source)
    _clear_output_dir_if_overwriting(training_args)
    train_dataset, eval_dataset = _tokenize_splits(
        raw_corpus, tokenizer, validation_percentage, data_args, training_args
    )
    trainer, metrics = _train(model, tokenizer, train_dataset, eval_dataset, resume_from, data_args, training_args)
    train_samples = None if data_args.streaming else len(train_dataset)
    _publish(trainer, metrics, train_samples, tokenizer_origin, source, model_args, data_args, training_args)


def _check_data_flags(data_args: DataArguments, training_args: SeedPretrainingArguments) -> float:
    """Refuse data flags that contradict each other; returns the validation percentage, its default filled in."""
    streaming = data_args.streaming
    validation_percentage = data_args.validation_split_percentage
    if validation_percentage is None:
        validation_percentage = 0.0 if streaming else 5.0
    if streaming and validation_percentage > 0:
        raise InputError("--validation_split_percentage is not available with --streaming; set it to 0.")
    if streaming and training_args.max_steps <= 0:
        raise InputError("--streaming needs --max_steps: a stream has no length to count epochs by.")
    if not 0 <= validation_percentage < 100:
        raise InputError(f"--validation_split_percentage {validation_percentage}: must be in [0, 100).")
    return validation_percentage


def _fill_defaults_for_the_corpus(data_args: DataArguments, training_args: SeedPretrainingArguments) -> None:
    bundled_corpus = not (data_args.train_file or data_args.dataset_dir)
    if training_args.num_train_epochs is None:
        training_args.num_train_epochs = BUNDLED_CORPUS_EPOCHS if bundled_corpus else DEFAULT_EPOCHS
    if training_args.learning_rate is None:
        training_args.learning_rate = BUNDLED_CORPUS_LEARNING_RATE if bundled_corpus else DEFAULT_LEARNING_RATE
    if training_args.train_sampling_strategy is None:
        training_args.train_sampling_strategy = BUNDLED_CORPUS_SAMPLING if bundled_corpus else DEFAULT_SAMPLING


def _resolve_start(
    model_args: ModelArguments, data_args: DataArguments, training_args: SeedPretrainingArguments
) -> ModelSource:
    source = resolve_model_source(model_args)
    check_flags_that_hold_the_start(training_args, source.path)
    if training_args.decoder_learning_rate is None:
        warm_start = source.kind == "bert"
        training_args.decoder_learning_rate = training_args.learning_rate * (WARM_START_DECODER_LR_FACTOR if warm_start else 1)
    elif training_args.decoder_learning_rate <= 0:
        raise InputError(f"--decoder_learning_rate {training_args.decoder_learning_rate}: must be positive.")
    check_lengths(source.config, data_args)
    return source


def _load_corpus(data_args: DataArguments, training_args: SeedPretrainingArguments) -> Dataset | IterableDataset:
    """The corpus, read and checked once: the main process reads the files through (a refusal reaches every
    process) and builds datasets' cache of them; the other processes then load that cache. They wait for it at a
    barrier of --ddp_timeout seconds (default 1,800): raise it for a corpus that takes longer to read."""
    streaming = data_args.streaming
    if data_args.train_file:

        def refusal() -> str | None:
            try:
                check_train_files(data_args.train_file, data_args.text_column, streaming)
            except InputError as error:
                return str(error)
            return None

        message = on_main_process(refusal)
        if message is not None:
            raise InputError(message)
    with training_args.main_process_first(desc="reading the corpus"):
        raw_corpus = load_raw_corpus(
            data_args.train_file, data_args.dataset_dir, data_args.text_column, streaming, check=False
        )
    if data_args.max_train_samples is not None:
        raw_corpus = raw_corpus.take(data_args.max_train_samples) if streaming else raw_corpus.select(
            range(min(data_args.max_train_samples, len(raw_corpus)))
        )
    return raw_corpus


def _inspect_output_dir(training_args: SeedPretrainingArguments) -> ExistingRun | None:
    if training_args.overwrite_output_dir:
        if training_args.resume_from_checkpoint:
            raise InputError("--overwrite_output_dir and --resume_from_checkpoint contradict each other.")
        return None
    # The main process removes cut-short checkpoints first; the others then see the cleaned folder.
    with training_args.main_process_first(desc="inspecting --output_dir"):
        return find_existing_run(training_args.output_dir)


def _settle_tokenizer(
    model_args: ModelArguments,
    data_args: DataArguments,
    seed: int,
    source: ModelSource,
    existing: ExistingRun | None,
    raw_corpus: Dataset | IterableDataset,
) -> tuple[PreTrainedTokenizerFast, str]:
    """The tokenizer the run uses and where it came from (for the card), and the model's vocabulary size made to
    match it where the config follows it."""
    config = source.config
    if model_args.tokenizer_name:
        tokenizer, tokenizer_source = load_tokenizer(model_args.tokenizer_name), f"--tokenizer_name {model_args.tokenizer_name}"
    elif existing is not None:
        tokenizer = load_tokenizer(str(existing.model_dir), "--output_dir")
        tokenizer_source = str(existing.model_dir)
    elif source.path is not None:
        tokenizer = load_tokenizer(source.path, "--model_name_or_path")
        tokenizer_source = f"--model_name_or_path {source.path}"
    else:
        vocab_size = model_args.tokenizer_vocab_size or config.vocab_size
        texts, sample = tokenizer_training_texts(
            raw_corpus, data_args.text_column, model_args.tokenizer_training_texts, seed
        )
        logger.info("Training a %d-token WordPiece tokenizer on %s", vocab_size, sample)
        # Every process trains the same tokenizer: training is deterministic.
        tokenizer = train_wordpiece_tokenizer(texts, vocab_size, config.max_position_embeddings)
        tokenizer_source = f"a {len(tokenizer):,}-token WordPiece tokenizer trained on {sample}"
        source.vocab_follows_tokenizer = "vocab_size" not in source.overrides
    if source.vocab_follows_tokenizer:
        config.vocab_size = len(tokenizer)
    check_vocabulary(tokenizer, config, tokenizer_source)
    return tokenizer, tokenizer_source


def _already_finished(training_args: SeedPretrainingArguments, existing: ExistingRun, config) -> bool:
    """Whether --output_dir holds this run's final model and nothing is to resume; refuses another model's run."""
    check_same_model(training_args.output_dir, existing, config)
    published = Path(training_args.output_dir)
    finished = (published / FINISHED_MARKER).is_file() and finished_at(published, training_args)
    if finished and training_args.resume_from_checkpoint is None:
        logger.warning(
            "%s already holds this run's final model, trained to step %d: nothing to train. Pass a larger "
            "--max_steps to train on, or --overwrite_output_dir to start over.", published, finished,
        )
        return True
    return False


def _checkpoint_to_resume(training_args: SeedPretrainingArguments, existing: ExistingRun | None) -> str | None:
    resume_from = training_args.resume_from_checkpoint
    if resume_from is None and existing is not None and existing.last_checkpoint is not None:
        resume_from = str(existing.last_checkpoint)
        logger.warning("Resuming from %s (pass --overwrite_output_dir to start over)", resume_from)
    if resume_from is not None:
        check_same_frozen_encoder(resume_from, training_args.freeze_encoder)
    return resume_from


def _build_model(training_args: SeedPretrainingArguments, source: ModelSource) -> SeedEncoderForPreTraining:
    set_seed(training_args.seed)
    if source.path is None:
        model = SeedEncoderForPreTraining(source.config)
    else:
        try:
            model = SeedEncoderForPreTraining.from_encoder_checkpoint(source.path, source.config)
        except ValueError as error:
            raise InputError(f"--model_name_or_path {error}") from None
    if training_args.freeze_encoder:
        model.freeze_encoder()
        trained = sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)
        logger.info(
            "--freeze_encoder: training %d of the model's %d weights (the MLM head's transform and bias, the decoder's "
            "own weights); the encoder stays as %s has it", trained, model.num_parameters(), source.path,
        )
    return model


def _clear_output_dir_if_overwriting(training_args: SeedPretrainingArguments) -> None:
    if training_args.overwrite_output_dir:
        with training_args.main_process_first(desc="clearing --output_dir"):
            if training_args.process_index == 0:
                clear_output_dir(training_args.output_dir)


def _tokenize_splits(
    raw_corpus: Dataset | IterableDataset,
    tokenizer: PreTrainedTokenizerFast,
    validation_percentage: float,
    data_args: DataArguments,
    training_args: SeedPretrainingArguments,
) -> tuple[Dataset | IterableDataset, Dataset | None]:
    """The tokenized training set and, where a validation share is asked for, the tokenized validation set."""
    with training_args.main_process_first(desc="tokenizing the corpus"):
        if not data_args.streaming and validation_percentage > 0:
            split = raw_corpus.train_test_split(test_size=validation_percentage / 100, seed=training_args.seed)
            train_texts, eval_texts = split["train"], split["test"]
        else:
            train_texts, eval_texts = raw_corpus, None
        if isinstance(train_texts, IterableDataset) and train_texts.n_shards < training_args.world_size:
            train_texts = shared_out_by_example(train_texts, training_args.world_size)
        tokenize_kwargs = dict(
            tokenizer=tokenizer,
            text_column=data_args.text_column,
            max_seq_length=data_args.max_seq_length,
            num_proc=data_args.preprocessing_num_workers,
            load_from_cache_file=not data_args.overwrite_cache,
            whole_word_mask=data_args.whole_word_mask,
        )
        train_dataset = tokenize_corpus(train_texts, **tokenize_kwargs)
        eval_dataset = tokenize_corpus(eval_texts, **tokenize_kwargs) if eval_texts is not None else None
    if isinstance(train_dataset, IterableDataset):
        # Every process reads its own shard of the stream (accelerate shares a datasets stream out by shard when it
        # has one per process, which `shared_out_by_example` makes sure of); by default process 0 would read it all
        # and dispatch batches to the others.
        training_args.accelerator_config.dispatch_batches = False
    return train_dataset, eval_dataset


def _train(
    model: SeedEncoderForPreTraining,
    tokenizer: PreTrainedTokenizerFast,
    train_dataset: Dataset | IterableDataset,
    eval_dataset: Dataset | None,
    resume_from: str | None,
    data_args: DataArguments,
    training_args: SeedPretrainingArguments,
) -> tuple[SeedPretrainingTrainer, dict]:
    """Train (or restore a finished run), evaluate, and save the metrics and the trainer state."""
    collator = DataCollatorForSeedPretraining(
        tokenizer=tokenizer,
        mlm_probability=data_args.mlm_probability,
        whole_word_mask=data_args.whole_word_mask,
        seed=training_args.seed,
    )
    trainer = SeedPretrainingTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collator,
        processing_class=tokenizer,
    )
    metrics = train_or_restore(trainer, resume_from)
    if eval_dataset is not None:
        metrics.update(trainer.evaluate())
    metrics["global_step"] = trainer.state.global_step
    trainer.save_metrics("all", metrics)
    trainer.save_state()
    return trainer, metrics


def _publish(
    trainer: SeedPretrainingTrainer,
    metrics: dict,
    train_samples: int | None,
    tokenizer_origin: str,
    source: ModelSource,
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: SeedPretrainingArguments,
) -> None:
    """Stage the final model with its loss plot and model card, move it into --output_dir, and push it if asked."""
    staged = staging_dir(training_args.output_dir)
    trainer.save_model(str(staged))  # on every process: sharded (FSDP, DeepSpeed) weights are gathered here
    if trainer.is_world_process_zero():
        plot_loss_curves(trainer.state.log_history, staged / LOSS_PLOT)
        card = render_model_card(
            config=trainer.model.config,
            log_history=trainer.state.log_history,
            train_metrics={**metrics, "epoch": trainer.state.epoch or 0.0},
            training_args=training_args,
            data_description=_describe_data(data_args),
            max_seq_length=data_args.max_seq_length,
            train_samples=train_samples,
            tokenizer_origin=tokenizer_origin,
            warm_start=source.path if source.kind == "bert" else None,
            continued_from=source.path if source.kind == "seed" else None,
            frozen_encoder=training_args.freeze_encoder,
            anchor_loss_weight=training_args.anchor_loss_weight,
            base_model=model_args.base_model,
            repo_id=training_args.hub_model_id or Path(training_args.output_dir).name,
        )
        card.save(staged / "README.md")
        if source.sentence_transformer is not None:
            write_sentence_transformer_modules(source.sentence_transformer, staged)
        publish_final_model(training_args.output_dir)
        if training_args.push_to_hub:
            push_final_model(training_args, "SEED-Encoder pretraining: final model")
    trainer.accelerator.wait_for_everyone()
