"""Retrieval fine-tuning with sentence-transformers' trainer: the library function behind `training/finetune.py`.

Training runs in rounds. Before each, the round's examples are built: training pairs with hard
negatives (given, mined by BM25, or ANCE-style from the current model's own index) and, with a
teacher, its scores. Every input is checked before anything is written; an interrupted run
resumes from its last whole round or checkpoint; the final model is the round with the best dev
nDCG@10, and appears in the output folder only once it is complete.
"""

import json
import logging
import shutil
from dataclasses import asdict, replace
from pathlib import Path

from accelerate.utils import broadcast_object_list
from sentence_transformers import SentenceTransformerTrainer
from transformers import set_seed

import modeling_seed  # noqa: F401  (registers SEED with the Auto classes in every process)

from ..common.errors import InputError
from ..common.models import load_sentence_transformer, model_kind
from ..common.output_dir import clear_output_dir, publish_final_model, staging_dir
from ..evaluation.evaluator import RetrievalEvaluator
from ..evaluation.retrievers import DenseRetriever
from .arguments import FinetuningDataArguments, FinetuningModelArguments, RecipeArguments, SeedFinetuningArguments
from .data import TrainingSet, training_set_from_beir, training_set_from_crops, training_set_from_pairs
from .losses import build_loss, teacher_label_scale
from .model_card import describe_recipe, write_model_card
from .examples import examples_dataset
from .rounds import RoundPlan, prepare_examples, train_round, write_json_atomically
from .teachers import check_teacher_specs, load_teacher

logger = logging.getLogger(__name__)
RUN_FILE = "finetuning_run.json"
START_METRICS_FILE = "start_dev_metrics.json"
DEFAULT_MAX_SEQ_LENGTH = 256


def load_training_set(data_args: FinetuningDataArguments, seed: int) -> TrainingSet:
    if data_args.data_dir:
        return training_set_from_beir(
            data_args.data_dir, data_args.dev_fraction, data_args.max_train_queries, seed, data_args.skip_unknown_ids
        )
    if data_args.train_file:
        return training_set_from_pairs(data_args.train_file, data_args.dev_fraction, data_args.max_train_queries, seed)
    from ..pretraining.corpus import embedded_corpus_passages, load_raw_corpus

    if data_args.corpus_file:
        corpus = load_raw_corpus(data_args.corpus_file, None, data_args.text_column)
        passages = corpus[data_args.text_column]
        description = ", ".join(f"`{Path(name).name}`" for name in data_args.corpus_file)
    else:
        passages = embedded_corpus_passages()
        description = "CPython's bundled reference documentation (`pydoc_data.topics`)"
    return training_set_from_crops(passages, data_args.dev_fraction, seed, description)


def load_starting_model(model_args: FinetuningModelArguments):
    path = model_args.model_name_or_path
    if not Path(path).is_dir():
        hint = " Run `accelerate launch training/pretrain.py` first, which writes it." if path == "seed-encoder" else ""
        raise InputError(
            f"--model_name_or_path {path}: no such folder.{hint} Pass a SEED pretraining folder, a BERT-family "
            "checkpoint or a SentenceTransformer folder (nothing is downloaded)."
        )
    model = load_sentence_transformer(path, pooling=model_args.pooling, max_seq_length=model_args.max_seq_length)
    if model_args.max_seq_length is None:
        model.max_seq_length = min(model.max_seq_length or DEFAULT_MAX_SEQ_LENGTH, DEFAULT_MAX_SEQ_LENGTH)
    model.model_card_data.local_files_only = True
    return model


def load_round_model(plan: RoundPlan):
    model = load_sentence_transformer(str(plan.model_dir))
    model.model_card_data.local_files_only = True
    return model


def on_main_process(training_args, work):
    """`work()` run by the main process alone, its result sent to every process (mining is not sharded)."""
    result = [work() if training_args.process_index == 0 else None]
    if training_args.world_size > 1:
        broadcast_object_list(result, from_process=0)
    return result[0]


def starting_model_metrics(path: Path, model, evaluator, training_args) -> dict:
    """Dev metrics of the model before fine-tuning: the baseline the card compares against (computed once)."""
    if path.is_file():
        return json.loads(path.read_text())
    metrics = evaluator(model)
    if training_args.process_index == 0:
        write_json_atomically(path, metrics)
    return metrics


def run_description(model_args, data_args, recipe, training_args) -> dict:
    """What defines the run: an output folder holding another one is refused rather than mixed."""
    return {
        "model": asdict(model_args),
        "data": asdict(data_args),
        "recipe": asdict(recipe),
        "seed": training_args.seed,
        "learning_rate": training_args.learning_rate,
        "per_device_train_batch_size": training_args.per_device_train_batch_size,
        "num_train_epochs": training_args.num_train_epochs,
    }


def check_output_dir(output_dir: Path, description: dict, overwrite: bool) -> None:
    run_file = output_dir / RUN_FILE
    if overwrite or not output_dir.is_dir() or not any(output_dir.iterdir()):
        return
    if not run_file.is_file():
        raise InputError(
            f"--output_dir {output_dir}: the folder is not empty and holds no fine-tuning run to continue. Choose "
            "another --output_dir, or pass --overwrite_output_dir to replace its contents."
        )
    previous = json.loads(run_file.read_text())
    differences = sorted(
        f"{section}.{key}"
        for section in description
        for key in (description[section] if isinstance(description[section], dict) else [None])
        if (previous.get(section) if key is None else previous.get(section, {}).get(key))
        != (description[section] if key is None else description[section][key])
    )
    if differences:
        raise InputError(
            f"--output_dir {output_dir} holds a different fine-tuning run (differs in {', '.join(differences)}). Rerun "
            "with the same arguments to resume it, choose another --output_dir, or pass --overwrite_output_dir."
        )


def run_finetuning(
    model_args: FinetuningModelArguments,
    data_args: FinetuningDataArguments,
    recipe: RecipeArguments,
    training_args: SeedFinetuningArguments,
) -> Path:
    """Fine-tune a Siamese retriever and write it to `training_args.output_dir`; returns that folder."""
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        level=logging.INFO if training_args.should_log else logging.WARNING,
    )
    output_dir = Path(training_args.output_dir)
    check_teacher_specs(recipe.teacher or [])
    training_set = load_training_set(data_args, training_args.seed)
    test_collection = None
    if data_args.eval_split:
        from ..evaluation.collection import load_collection

        test_collection = load_collection(data_args.data_dir, data_args.eval_split, data_args.skip_unknown_ids)
    model = load_starting_model(model_args)
    description = run_description(model_args, data_args, recipe, training_args)
    check_output_dir(output_dir, description, training_args.overwrite_output_dir)

    if training_args.process_index == 0:
        if training_args.overwrite_output_dir:
            clear_output_dir(str(output_dir))
        output_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomically(output_dir / RUN_FILE, description)
    evaluator = RetrievalEvaluator(training_set.dev, name="dev", batch_size=training_args.per_device_eval_batch_size)
    start_metrics = starting_model_metrics(output_dir / START_METRICS_FILE, model, evaluator, training_args)
    teacher = load_teacher(recipe.teacher, training_set.corpus) if recipe.teacher else None

    plans = [RoundPlan(number, output_dir / f"round-{number}") for number in range(1, recipe.mining_rounds + 1)]
    for plan in plans:
        if plan.is_complete:
            model = load_round_model(plan)
            continue
        set_seed(training_args.seed + plan.number)
        examples, scores = on_main_process(
            training_args,
            lambda: prepare_examples(
                plan, training_set, recipe, training_args.seed,
                retriever_for_model=lambda: DenseRetriever(
                    model, name="self", batch_size=training_args.per_device_eval_batch_size
                ),
                teacher=teacher,
                label_scale=teacher_label_scale(recipe, sparse=False),
            ),
        )
        trainer = SentenceTransformerTrainer(
            model=model,
            args=replace(training_args, output_dir=str(plan.folder)),
            train_dataset=examples_dataset(training_set, examples, scores),
            loss=build_loss(model, recipe),
            evaluator=evaluator,
        )
        train_round(plan, trainer)

    best = max(plans, key=lambda plan: plan.dev_metrics()[evaluator.primary_metric])
    test_metrics = None
    if test_collection is not None:
        final_model = load_round_model(best)
        test_metrics = RetrievalEvaluator(
            test_collection, name=data_args.eval_split, batch_size=training_args.per_device_eval_batch_size
        )(final_model)
    if training_args.process_index == 0:
        staged = staging_dir(str(output_dir))
        shutil.rmtree(staged, ignore_errors=True)
        shutil.copytree(best.model_dir, staged)
        write_model_card(
            staged,
            plans=plans,
            best=best,
            start_metrics=start_metrics,
            test_metrics=test_metrics,
            model_args=model_args,
            data_args=data_args,
            recipe_summary=describe_recipe(recipe, build_loss(model, recipe)),
            training_args=training_args,
            training_set=training_set,
            starting_kind=model_kind(model_args.model_name_or_path),
            model_class="SentenceTransformer",
            model_description=f"{type(model[0]).__name__} + {model[1].get_pooling_mode_str()} pooling, "
            f"max {model.max_seq_length} tokens",
        )
        publish_final_model(str(output_dir))
    return output_dir
