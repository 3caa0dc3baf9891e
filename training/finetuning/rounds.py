"""One training round: negatives, teacher scores, `trainer.train()`, and the round's model on disk.

A round's folder holds, in the order they are written: `examples.json` (its training examples and
teacher scores, so a resumed round trains on exactly the same data), the Trainer's checkpoints,
`dev_metrics.json`, and `model/`, the round's finished model, moved into place with config.json
last. A round with `model/config.json` is complete; an incomplete one resumes from its last whole
checkpoint, or is finished from it without training where that checkpoint holds the round's last step.
"""

import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from accelerate.utils import broadcast_object_list

from ..common.output_dir import FINISHED_MARKER, last_complete_checkpoint, publish_final_model, staging_dir
from ..common.resuming import train_or_restore
from ..common.serving import add_serving_fields
from ..common.timing import PhaseTimer
from ..evaluation.retrievers import BM25Retriever
from .training_set import TrainingSet
from .examples import teacher_scores
from .negatives import draw_negatives, mine_negative_candidates

logger = logging.getLogger(__name__)
EXAMPLES_FILE = "examples.json"
DEV_METRICS_FILE = "dev_metrics.json"
MODEL_DIR = "model"
SAVING = "saving"


@dataclass
class RoundPlan:
    number: int
    folder: Path

    @property
    def model_dir(self) -> Path:
        return self.folder / MODEL_DIR

    @property
    def is_complete(self) -> bool:
        return (self.model_dir / FINISHED_MARKER).is_file()

    @property
    def is_evaluated(self) -> bool:
        return (self.folder / DEV_METRICS_FILE).is_file()

    def dev_metrics(self) -> dict:
        return json.loads((self.folder / DEV_METRICS_FILE).read_text())

    def dev_per_query(self) -> dict[str, float]:
        """The round's primary dev metric of each dev query (query id -> value)."""
        return json.loads(per_query_file(self.folder / DEV_METRICS_FILE).read_text())

    def log_history(self) -> list[dict]:
        return json.loads((self.folder / "trainer_state.json").read_text())["log_history"]


def round_plan(state_dir: Path, number: int) -> RoundPlan:
    """Round `number` of a run whose state is kept in `state_dir`."""
    return RoundPlan(number, state_dir / f"round-{number}")


def write_json_atomically(path: Path, value) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(value))
    temporary.replace(path)


def per_query_file(metrics_file: Path) -> Path:
    """Where the per-query values of the primary metric are kept beside a metrics file."""
    return metrics_file.with_name(f"{metrics_file.stem}_per_query.json")


def is_kept(metrics_file: Path) -> bool:
    """Whether `evaluated_once` has kept the metrics and their per-query twin in `metrics_file`."""
    return metrics_file.is_file() and per_query_file(metrics_file).is_file()


def evaluated_once(metrics_file: Path, evaluate: Callable[[], tuple[dict, dict]]) -> tuple[dict, dict]:
    """(metrics, per-query values) of `evaluate()`, computed once and kept in `metrics_file` and its per-query twin:
    the twin is written first, so a resumed run that finds the metrics finds both (a run from before per-query
    values were kept evaluates again)."""
    per_query = per_query_file(metrics_file)
    if not is_kept(metrics_file):
        metrics, values = evaluate()
        write_json_atomically(per_query, values)
        write_json_atomically(metrics_file, metrics)
    return json.loads(metrics_file.read_text()), json.loads(per_query.read_text())


def computed_once(path: Path, compute: Callable):
    """`compute()`, computed once and kept in `path` as JSON: a resumed run reads it back instead of computing again."""
    if not path.is_file():
        write_json_atomically(path, compute())
    return json.loads(path.read_text())


def negative_candidates(round_number: int, source: str, training_set: TrainingSet, recipe, retriever_for_model):
    """Who ranks the negatives of this round: given ones, BM25, or the model itself (ANCE-style after round 1; from
    round 1 with `model`, whose start already retrieves well)."""
    if source == "none":
        return training_set.given_negatives or None
    if source == "model" or (source == "self" and round_number > 1):
        retriever = retriever_for_model()
    else:
        retriever = BM25Retriever()
    return mine_negative_candidates(retriever, training_set, recipe.negatives_range_min, recipe.negatives_range_max)


def prepare_examples(
    plan: RoundPlan, training_set: TrainingSet, recipe, seed: int, retriever_for_model, teacher,
    label_scale: Callable[[list[tuple]], float],
):
    """The round's examples (query id, positive id, negative ids) and teacher scores, mined once and kept; the scores
    are multiplied by `label_scale(examples)`."""
    path = plan.folder / EXAMPLES_FILE
    if path.is_file():
        saved = json.loads(path.read_text())
        scores = None if saved["scores"] is None else np.asarray(saved["scores"], dtype=np.float32)
        return [tuple(example) for example in saved["examples"]], scores
    candidates = negative_candidates(plan.number, recipe.negatives, training_set, recipe, retriever_for_model)
    if candidates is None:
        examples = [(query_id, positive, []) for query_id, positive in training_set.pairs()]
    else:
        examples = draw_negatives(candidates, training_set, recipe.negatives_per_query, seed + plan.number)
    scores = None
    if teacher is not None:
        scores = teacher_scores(teacher, training_set, examples) * label_scale(examples)
    plan.folder.mkdir(parents=True, exist_ok=True)
    write_json_atomically(path, {"examples": examples, "scores": None if scores is None else scores.tolist()})
    return examples, scores


def train_round(plan: RoundPlan, trainer, timer: PhaseTimer) -> dict:
    """Train the round (resuming its last whole checkpoint), then write its dev metrics, per query too, and its
    model."""
    checkpoint = last_complete_checkpoint(plan.folder)
    train_or_restore(trainer, checkpoint)
    metrics = final_evaluation(trainer)
    if trainer.is_world_process_zero():
        with timer.phase(SAVING):
            staged = staging_dir(str(plan.model_dir))
            shutil.rmtree(staged, ignore_errors=True)  # what a run killed while saving left
            # On the main process only: sentence-transformers' `_save` writes on every process that calls it.
            trainer.save_model(str(staged))
            if trainer.evaluator.max_seq_length is not None:  # the length it was judged at, as the published folder
                add_serving_fields(staged, trainer.evaluator.max_seq_length)
            trainer.state.save_to_json(str(plan.folder / "trainer_state.json"))
            write_json_atomically(per_query_file(plan.folder / DEV_METRICS_FILE), trainer.evaluator.per_query)
            write_json_atomically(plan.folder / DEV_METRICS_FILE, metrics)
            publish_final_model(str(plan.model_dir))
    trainer.accelerator.wait_for_everyone()
    return metrics


def final_evaluation(trainer) -> dict:
    """The evaluator's metrics of the trained model: those logged at the last step when there are, else computed.
    With --load_best_model_at_end the trainer has reloaded the best checkpoint's weights, which the last step's
    metrics do not describe: that model is evaluated again; so is a round finished from its last checkpoint in this
    process, whose evaluator has not seen the model (the per-query values are kept only in memory)."""
    prefix = f"eval_{trainer.evaluator.name}_"
    logged = [entry for entry in trainer.state.log_history if any(key.startswith(prefix) for key in entry)]
    # The evaluator runs on the main process alone (sentence-transformers shares its encoding): its word decides.
    unseen = broadcast_object_list([trainer.evaluator.per_query is None], from_process=0)[0]
    if not logged or logged[-1]["step"] != trainer.state.global_step or trainer.args.load_best_model_at_end or unseen:
        trainer.evaluate()
        logged = [entry for entry in trainer.state.log_history if any(key.startswith(prefix) for key in entry)]
    return {key.removeprefix("eval_"): value for key, value in logged[-1].items() if key.startswith(prefix)}
