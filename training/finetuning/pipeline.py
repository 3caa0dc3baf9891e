"""Retrieval fine-tuning with sentence-transformers' trainers: the library function behind `training/finetune.py`.

Training runs in rounds. Before each, the round's examples are built: training pairs with hard
negatives (given, mined by BM25, or ANCE-style from the current model's own index) and, with a
teacher, its scores. Every input is checked before anything is written; an interrupted run
resumes from its last whole round or checkpoint; the final model is the round with the best dev
nDCG@10, or the start itself, unchanged, when no round beats it there; it appears in the output folder only once it
is complete. With --candidate_starts the start is the best of them and --model_name_or_path on the dev split
(`starts.py`). A SEED start is loaded, trained and
saved as plain BERT (`common/models.py`), and the published folder carries the fields serving tools read
(`common/serving.py`): it loads without this package or remote code.

Each model encodes the corpus once: the encoding is kept in the embedding cache that `training/evaluate.py`
uses (`--cache_dir`), keyed by the model's weights and the corpus, and the dev evaluation, the next round's
mining and the final evaluation of the same weights read it from there, as do a resumed run, another run from
the same start, and evaluate.py scoring the start or the result. Where the run's time went (training steps,
corpus encodings, mining, evaluation, saving, the rest) is logged at the end and kept in `finetuning/timings.json`.

Under `accelerate launch --num_processes N`, evaluations, mining and teacher scoring run on the main process (one
ranking, one set of files) with their encodings shared by every process (`common/shared_encoding.py`): each encodes
a 1/N slice of every corpus and query set, and `timings.json` keeps how many texts each process encoded
(`encoded_texts`); the rounds' own dev evaluations, called by the trainer, are shared by sentence-transformers.
"""

import copy
import functools
import json
import logging
import shutil
from dataclasses import asdict
from pathlib import Path

from transformers import set_seed

import modeling_seed  # noqa: F401  (registers SEED with the Auto classes in every process)
from modeling_seed import SeedEncoderConfig

from ..common.distributed import on_main_process
from ..common.errors import InputError
from ..common.models import model_kind, transformer_config
from ..common.output_dir import (
    clear_output_dir,
    folder_content,
    output_dir_lock,
    publish_final_model,
    push_final_model,
    staging_dir,
)
from ..common.serving import add_serving_fields
from ..common.shared_encoding import SharedEncoding
from ..common.timing import PhaseTimer, TrainingStepTimer, breakdown_lines
from ..data.collection import Collection, load_collection
from ..evaluation.embedding_cache import CacheLedger, weights_fingerprint
from ..evaluation.evaluator import RetrievalEvaluator, indexed, model_retriever
from ..evaluation.report import STAT_COLUMNS
from .arguments import (
    SMALL_SEED_HIDDEN_SIZE,
    SMALL_SEED_LEARNING_RATE,
    TRAINED_START_LEARNING_RATE,
    FinetuningDataArguments,
    FinetuningModelArguments,
    RecipeArguments,
    SeedFinetuningArguments,
)
from .data import load_training_set
from .training_set import TrainingSet
from .examples import examples_dataset, own_index_scores
from .families import (
    Lengths, RetrieverFamily, check_dense_only_flags, check_published_length, retriever_family, served_and_trained_lengths,
)
from .fresh_crops import FreshCrops
from .model_card import describe_recipe, fill_card_data, write_model_card
from .rounds import (
    DEV_METRICS_FILE, SAVING, RoundPlan, evaluated_once, is_kept, prepare_examples, round_plan, train_round,
    write_json_atomically,
)
from .starts import (
    CANDIDATE_STARTS_FILE, best_start, candidate_dev_metrics, compare_with_start, decision_line, start_choice_line,
)
from .teachers import check_teacher_specs, load_teacher, with_start_teacher

logger = logging.getLogger(__name__)
# Everything but the final model: the run's arguments, metrics and rounds. Left out of Hub uploads.
STATE_DIR = "finetuning"
RUN_FILE = "run.json"
START_METRICS_FILE = "start_dev_metrics.json"
TIMINGS_FILE = "timings.json"
ENCODED_TEXTS = "encoded_texts"  # in TIMINGS_FILE: {phase: one [texts of process 0, of process 1, ...] per encoding}
START_EVALUATION = "start evaluation"
MINING = "mining"
# Folders whose own maximum length is the one their users serve them at (sentence_bert_config.json).


def check_starting_point(path: str, flag: str = "--model_name_or_path") -> None:
    if not Path(path).is_dir():
        hint = " Run `accelerate launch training/pretrain.py` first, which writes it." if path == "seed-encoder" else ""
        raise InputError(
            f"{flag} {path}: no such folder.{hint} Pass a SEED pretraining folder, a BERT-family "
            "checkpoint or a SentenceTransformer folder (nothing is downloaded)."
        )


def default_learning_rate(start: str) -> float:
    """The --learning_rate default for the start folder: see SMALL_SEED_LEARNING_RATE."""
    config = transformer_config(start)
    if config.get("model_type") == SeedEncoderConfig.model_type and config.get("hidden_size", 0) < SMALL_SEED_HIDDEN_SIZE:
        return SMALL_SEED_LEARNING_RATE
    return TRAINED_START_LEARNING_RATE


def run_description(model_args, data_args, recipe, training_args) -> dict:
    """What defines the run: an output folder holding another one is refused rather than mixed."""
    return {
        "model": asdict(model_args),
        "data": {name: value for name, value in asdict(data_args).items() if name != "cache_dir"},  # where, not what
        "recipe": asdict(recipe),
        "training": {
            name: getattr(training_args, name)
            for name in ("seed", "learning_rate", "per_device_train_batch_size", "num_train_epochs", "max_steps")
        },
    }


def check_output_dir(output_dir: Path, description: dict) -> None:
    """Refuse a folder that holds something other than this run (to resume) or nothing."""
    if not output_dir.is_dir() or not folder_content(output_dir):
        return
    run_file = output_dir / STATE_DIR / RUN_FILE
    if not run_file.is_file():
        raise InputError(
            f"--output_dir {output_dir}: the folder is not empty and holds no fine-tuning run to continue. Choose "
            "another --output_dir, or pass --overwrite_output_dir to replace its contents."
        )
    previous = json.loads(run_file.read_text())
    differences = [
        f"{section}.{key}"
        for section, values in description.items()
        for key, value in values.items()
        if previous.get(section, {}).get(key) != value
    ]
    if differences:
        raise InputError(
            f"--output_dir {output_dir} holds a different fine-tuning run (it differs in {', '.join(differences)}). "
            "Rerun with the same arguments to resume it, choose another --output_dir, or pass --overwrite_output_dir."
        )


def prepare_output_dir(output_dir: Path, description: dict, overwrite: bool) -> str | None:
    """Clear the folder when asked, and record the run in it; the reason to refuse the folder, or None."""
    if overwrite:
        clear_output_dir(str(output_dir))
    try:
        check_output_dir(output_dir, description)
    except InputError as error:
        return str(error)
    (output_dir / STATE_DIR).mkdir(parents=True, exist_ok=True)
    write_json_atomically(output_dir / STATE_DIR / RUN_FILE, description)
    return None


def own_index(model, corpus: dict[str, str], evaluator: RetrievalEvaluator, recipe: RecipeArguments):
    """The model's own index of the training corpus, for ANCE-style mining, at the training length: it ranks as the
    model being trained does, and its scores set a sparse student's label scale. The dev evaluation that ended the
    previous round encoded the corpus with these very weights (when the training corpus is the dev corpus, as in
    a BEIR collection, and the run is published at the length it trains at): its encoding is read from the cache
    rather than made again."""
    retriever = model_retriever(
        model, "self", evaluator.batch_size, evaluator.cache_dir, index_kind=recipe.mining_index,
        nprobe=recipe.mining_nprobe, **evaluator.dense_settings(model),
    )
    return indexed(retriever, corpus, evaluator.timer, evaluator.ledger)


def round_dataset(training_set: TrainingSet, examples, scores, seed: str):
    """The round's training dataset and the callbacks it needs: crop pairs without teacher scores draw new crops
    every epoch (`FreshCrops`); teacher scores belong to the fixed pairs they were computed on."""
    dataset = examples_dataset(training_set, examples, scores)
    if not training_set.passages or scores is not None:
        return dataset, []
    fresh_crops = FreshCrops(seed)
    return fresh_crops.apply(dataset, training_set, [query_id for query_id, _, _ in examples]), [fresh_crops]


def round_arguments(training_args: SeedFinetuningArguments, folder: Path) -> SeedFinetuningArguments:
    """The run's arguments with the round's folder as the Trainer's output_dir (its checkpoints go there).
    A copy, not `dataclasses.replace`: re-running __post_init__ on parsed arguments is not idempotent."""
    round_args = copy.copy(training_args)
    round_args.output_dir = str(folder)
    round_args.push_to_hub = False  # the final folder is uploaded once, when complete
    return round_args


def scored_by(evaluator: RetrievalEvaluator):
    """`model` -> (the evaluator's metrics of it, its per-query values of the primary metric)."""
    return lambda model: (evaluator(model), evaluator.per_query)


def evaluate_once(path: Path, model, evaluator, sharing: SharedEncoding, phase: str) -> tuple[dict, dict]:
    """The evaluator's metrics of `model` and its per-query values, computed once per output folder (by the main
    process, every process encoding its share) and kept in `path` and its per-query twin."""
    return sharing.run(phase, [model], lambda: evaluated_once(path, lambda: scored_by(evaluator)(model)))


def run_finetuning(
    model_args: FinetuningModelArguments,
    data_args: FinetuningDataArguments,
    recipe: RecipeArguments,
    training_args: SeedFinetuningArguments,
) -> Path:
    """Fine-tune a Siamese retriever and write it to `training_args.output_dir`; returns that folder."""
    timer = PhaseTimer()
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        level=logging.INFO if training_args.should_log else logging.WARNING,
    )
    check_starting_point(model_args.model_name_or_path)
    for path in model_args.candidate_starts or []:
        check_starting_point(path, "--candidate_starts")
    if training_args.learning_rate is None:
        training_args.learning_rate = default_learning_rate(model_args.model_name_or_path)
    family = retriever_family(model_args)
    check_dense_only_flags(family, recipe, data_args)
    if recipe.teacher:
        recipe.teacher = with_start_teacher(recipe.teacher, model_args.model_name_or_path, family.sparse)
    check_teacher_specs(recipe.teacher or [])
    if recipe.teacher_label_scale is None:
        recipe.teacher_label_scale = family.default_label_scale()
    training_set = load_training_set(data_args, training_args.seed)
    test_collection = None
    if data_args.eval_split:
        test_collection = load_collection(data_args.data_dir, data_args.eval_split, data_args.skip_unknown_ids)
    model = family.load_as_served(model_args.model_name_or_path, model_args)
    lengths = served_and_trained_lengths(model_args, model)
    check_published_length(lengths.published, model)
    model.max_seq_length = lengths.training

    output_dir = Path(training_args.output_dir)
    with output_dir_lock(str(output_dir), training_args.process_index == 0), SharedEncoding() as sharing:
        description = run_description(model_args, data_args, recipe, training_args)
        refusal = on_main_process(
            lambda: prepare_output_dir(output_dir, description, training_args.overwrite_output_dir)
        )
        if refusal is not None:
            raise InputError(refusal)
        finetune_in_rounds(
            family, model, model_args, data_args, recipe, training_args, training_set, test_collection, lengths,
            timer, sharing,
        )
        encoded_texts = sharing.per_process()  # gathered from every process
        if training_args.process_index == 0:
            report_timings(output_dir / STATE_DIR / TIMINGS_FILE, timer, encoded_texts)
    return output_dir


def report_timings(path: Path, timer: PhaseTimer, encoded_texts: dict[str, list[list[int]]]) -> None:
    """Log where the run's wall time went, and keep it in `path` with the texts each process encoded in each phase
    (`SharedEncoding.per_process`)."""
    breakdown = timer.breakdown()
    write_json_atomically(path, {**breakdown, ENCODED_TEXTS: encoded_texts})
    logger.info("Wall time of this run, by phase:\n%s", "\n".join(breakdown_lines(breakdown)))


def choose_start(
    family: RetrieverFamily, model, model_args, evaluator, state_dir: Path, training_args, sharing: SharedEncoding
):
    """(the start's path, its model, its dev metrics and per-query values, the line saying how it was chosen or
    None): --model_name_or_path, or with --candidate_starts whichever of them scores best on the dev split. Every
    process loads each candidate in turn and encodes its share of the dev split with it."""
    if not model_args.candidate_starts:
        start_metrics, start_per_query = evaluate_once(
            state_dir / START_METRICS_FILE, model, evaluator, sharing, START_EVALUATION
        )
        return model_args.model_name_or_path, model, start_metrics, start_per_query, None
    given = model_args.model_name_or_path
    paths = [given, *model_args.candidate_starts]
    metric = evaluator.primary_metric
    kept_in = state_dir / CANDIDATE_STARTS_FILE

    def scored(path: str) -> tuple[dict, dict]:
        candidate = model if path == given else family.load(path, model_args)
        return sharing.run(START_EVALUATION, [candidate], lambda: scored_by(evaluator)(candidate))

    # A resumed run reads the scores its main process kept; no process loads a candidate again.
    scores = None if on_main_process(lambda: is_kept(kept_in)) else {path: scored(path) for path in paths}
    metrics, per_query = on_main_process(lambda: candidate_dev_metrics(scores, kept_in))
    start_path = best_start(paths, metrics, metric)
    choice_line = start_choice_line(paths, metrics, metric, start_path)
    if start_path == given:
        logger.info(choice_line)
    else:  # the run trains another model than --model_name_or_path: said where a user looks
        logger.warning(choice_line)
        model = family.load(start_path, model_args)
    # Scored with the candidates already: kept where every run keeps its start's dev metrics, not scored again.
    start_metrics, start_per_query = on_main_process(lambda: evaluated_once(
        state_dir / START_METRICS_FILE, lambda: (metrics[start_path], per_query[start_path])
    ))
    return start_path, model, start_metrics, start_per_query, choice_line


def finetune_in_rounds(
    family: RetrieverFamily, model, model_args, data_args, recipe, training_args, training_set: TrainingSet,
    test_collection: Collection | None, lengths: Lengths, timer: PhaseTimer, sharing: SharedEncoding,
) -> None:
    """Choose the start, train the rounds, and publish the best of them and the start (see `choose_final_model`)."""
    state_dir = Path(training_args.output_dir) / STATE_DIR
    # Every dev evaluation runs at the published length: the run compares what it may publish with the start as served.
    ledger = CacheLedger()  # the encodings this run writes to --cache_dir, by weights
    evaluator = RetrievalEvaluator(
        training_set.dev, name="dev", batch_size=training_args.per_device_eval_batch_size, show_progress_bar=True,
        cache_dir=data_args.cache_dir, timer=timer, max_seq_length=lengths.published, ledger=ledger,
        embedding_dtype=data_args.embedding_dtype,
    )
    start_path, model, start_metrics, start_per_query, start_choice = choose_start(
        family, model, model_args, evaluator, state_dir, training_args, sharing
    )
    # Read by the main process alone, which writes and evicts the cache.
    start_weights = None
    if training_args.process_index == 0 and data_args.cache_dir is not None:
        start_weights = weights_fingerprint(model)
    plans = [round_plan(state_dir, number) for number in range(1, recipe.mining_rounds + 1)]
    train_rounds(
        family, model, model_args, recipe, training_args, training_set, plans, evaluator, start_path, timer, sharing
    )
    best, decision = choose_final_model(plans, start_per_query, evaluator.primary_metric, state_dir)
    final_model = family.load_as_served(start_path if best is None else str(best.model_dir), model_args)
    final_model.max_seq_length = lengths.published
    if best is None:  # saved from this model, with its card data (a round's folder is copied with its card)
        fill_card_data(final_model, model_args, training_set, start_path)
        final_model.model_card_data.train_datasets = []  # the published weights never saw them
    test_metrics = None
    if test_collection is not None:
        split = data_args.eval_split
        test_evaluator = RetrievalEvaluator(
            test_collection, name=split, batch_size=training_args.per_device_eval_batch_size, show_progress_bar=True,
            cache_dir=data_args.cache_dir, timer=timer, ledger=ledger, embedding_dtype=data_args.embedding_dtype,
        )
        test_metrics, _ = evaluate_once(
            state_dir / f"{split}_metrics.json", final_model, test_evaluator, sharing, f"{split} evaluation"
        )
    if training_args.process_index == 0:
        with timer.phase(SAVING):
            publish(
                final_model, best, family, model_args, data_args, recipe, training_args, training_set,
                card={
                    "plans": plans, "start_metrics": start_metrics, "test_metrics": test_metrics,
                    "start_path": start_path, "start_choice_line": start_choice, "decision_line": decision,
                    "lengths": asdict(lengths),
                },
            )
            # The encodings a user may still read (evaluate.py on the start or on the result) stay; the other
            # weights' are the run's own leftovers.
            ledger.evict(keep={start_weights, weights_fingerprint(final_model)})


def train_rounds(
    family: RetrieverFamily, model, model_args, recipe, training_args, training_set: TrainingSet,
    plans: list[RoundPlan], evaluator: RetrievalEvaluator, start_path: str, timer: PhaseTimer, sharing: SharedEncoding,
) -> None:
    """Train every round not yet complete, each from the model the previous one ended with. Mining and teacher
    scoring run on the main process, the model's and the teachers' encodings shared by every process."""
    teacher = load_teacher(recipe.teacher, training_set.corpus) if recipe.teacher else None
    for plan in plans:
        if plan.is_complete:
            model = family.load(str(plan.model_dir), model_args)
            # Kept by a run from before per-query values were: that round is scored again, at the published length.
            evaluate_once(plan.folder / DEV_METRICS_FILE, model, evaluator, sharing, f"round {plan.number} evaluation")
            continue
        set_seed(training_args.seed + plan.number)
        # Mining and the sparse label scale both read the round's start model's index: built (from the cache) once.
        model_index = functools.cache(lambda: own_index(model, training_set.corpus, evaluator, recipe))
        with timer.phase(MINING):
            examples, scores = sharing.run(
                f"round {plan.number} {MINING}",
                [model, *(teacher.models if teacher else [])],
                lambda: prepare_examples(
                    plan, training_set, recipe, training_args.seed,
                    retriever_for_model=model_index,
                    teacher=teacher,
                    label_scale=lambda examples: family.teacher_label_scale(
                        recipe, lambda: own_index_scores(model_index(), training_set, examples)
                    ),
                ),
            )
        fill_card_data(model, model_args, training_set, start_path)
        train_dataset, dataset_callbacks = round_dataset(training_set, examples, scores, f"{training_args.seed}/{plan.number}")
        trainer = family.trainer(
            model=model,
            args=round_arguments(training_args, plan.folder),
            train_dataset=train_dataset,
            loss=family.loss(model, recipe, model_args),
            evaluator=evaluator,
        )
        for callback in (TrainingStepTimer(timer), *dataset_callbacks):
            trainer.add_callback(callback)
        with family.training(trainer):
            train_round(plan, trainer, timer)


def choose_final_model(
    plans: list[RoundPlan], start_per_query: dict, metric: str, state_dir: Path
) -> tuple[RoundPlan | None, str]:
    """(the round to publish, or None to keep the start; the line saying why, logged and on the card): the best round
    on dev where its gain over the start is beyond the dev split's noise (`starts.DevComparison`)."""
    comparison = compare_with_start(plans, start_per_query, metric)
    decision = decision_line(comparison, state_dir)
    logger.log(logging.INFO if comparison.beyond_noise else logging.WARNING, decision)
    return comparison.published, decision


def publish(
    final_model, best: RoundPlan | None, family: RetrieverFamily, model_args, data_args, recipe, training_args,
    training_set: TrainingSet, card: dict,
) -> None:
    """Write the final model, at its published length, with its card into the output folder, whole or not at all."""
    output_dir = str(training_args.output_dir)
    staged = staging_dir(output_dir)
    shutil.rmtree(staged, ignore_errors=True)
    if best is None:  # the start as loaded, its weights unchanged (a SEED start as plain BERT)
        final_model.save_pretrained(staged)
    else:
        shutil.copytree(best.model_dir, staged)
    add_serving_fields(staged, final_model.max_seq_length)
    write_model_card(
        staged,
        best=best,
        model_args=model_args,
        data_args=data_args,
        recipe_summary=describe_recipe(recipe, family.loss(final_model, recipe, model_args)),
        training_args=training_args,
        training_set=training_set,
        starting_kind=model_kind(card["start_path"]),
        model_class=family.name,
        model_description=family.describe(final_model),
        extra_columns=[(stat, header) for stat, header, _ in STAT_COLUMNS] if family.sparse else [],
        **card,
    )
    publish_final_model(output_dir)
    if training_args.push_to_hub:
        push_final_model(training_args, "seed-encoder fine-tuning: final model", (STATE_DIR, f"{STATE_DIR}/**"))
