"""A fine-tuning run's output folder read from outside the pipeline (benchmarks, a user's own scripts): its
arguments, the start's and each round's dev metrics, the round the run published (or that it kept its start), each
round's model and teacher-scored examples, and the candidate starts it weighed. The folder's layout stays the
pipeline's to change: readers go through this class, never through its file names."""

import json
from pathlib import Path

from ..common.errors import InputError
from .pipeline import RUN_FILE, START_METRICS_FILE, STATE_DIR
from .rounds import EXAMPLES_FILE, RoundPlan, per_query_file, round_plan
from .starts import CANDIDATE_STARTS_FILE, best_round, best_start, compare_with_start, decision_line


class FinetuningRun:
    """The run `training/finetune.py` wrote to `output_dir` (finished or not)."""

    def __init__(self, output_dir: str | Path):
        self.output_dir = Path(output_dir)
        self._state = self.output_dir / STATE_DIR
        if not (self._state / RUN_FILE).is_file():
            raise InputError(f"{output_dir}: not the --output_dir of a fine-tuning run (no {STATE_DIR}/{RUN_FILE}).")

    @property
    def arguments(self) -> dict:
        """The run's model, data, recipe and training arguments, as it recorded them."""
        return json.loads((self._state / RUN_FILE).read_text())

    @property
    def start_dev_metrics(self) -> dict:
        """The start's dev metrics (e.g. `dev_ndcg@10`), measured before training."""
        return json.loads((self._state / START_METRICS_FILE).read_text())

    @property
    def start_dev_per_query(self) -> dict[str, float]:
        """The start's primary dev metric of each dev query."""
        return json.loads(per_query_file(self._state / START_METRICS_FILE).read_text())

    @property
    def primary_metric(self) -> str:
        return next(name for name in self.start_dev_metrics if name.endswith("ndcg@10"))

    def round(self, number: int) -> RoundPlan:
        """Round `number` (from 1): its `model_dir`, `dev_metrics()`, `dev_per_query()` and `log_history()`."""
        return round_plan(self._state, number)

    @property
    def rounds(self) -> list[RoundPlan]:
        """The rounds that have dev metrics, in order."""
        plans = []
        while (plan := self.round(len(plans) + 1)).folder.is_dir():
            plans.append(plan)
        return [plan for plan in plans if plan.is_evaluated]

    @property
    def published_round(self) -> RoundPlan | None:
        """The round the run's own rule publishes (a dev gain beyond the dev's noise), or None where it keeps its
        start."""
        return best_round(self.rounds, self.start_dev_per_query, self.primary_metric)

    @property
    def decision(self) -> str:
        """What the run said of its choice, in one line: its best round against the start on dev, with the gain's
        interval, and which of the two it published."""
        comparison = compare_with_start(self.rounds, self.start_dev_per_query, self.primary_metric)
        return decision_line(comparison, self._state)

    def round_examples(self, number: int) -> dict:
        """Round `number`'s training examples as the run wrote them: `examples`, each (query id, positive id, negative
        ids), and `scores`, the teacher's score of each pair (None without a teacher)."""
        return json.loads((self.round(number).folder / EXAMPLES_FILE).read_text())

    @property
    def candidate_starts_dev_metrics(self) -> dict[str, dict] | None:
        """Each candidate start's dev metrics where the run had --candidate_starts, else None."""
        path = self._state / CANDIDATE_STARTS_FILE
        return json.loads(path.read_text()) if path.is_file() else None

    @property
    def trained_start(self) -> str:
        """The start the run trained: --model_name_or_path, or the best of its candidate starts on dev."""
        given = self.arguments["model"]["model_name_or_path"]
        candidates = self.candidate_starts_dev_metrics
        return given if candidates is None else best_start(list(candidates), candidates, self.primary_metric)
