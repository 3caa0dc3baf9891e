"""Where a run's wall time goes: seconds and counts per named phase, each second counted in one phase only.

Phases nest: a phase's own seconds leave out those of the phases inside it (a corpus encoding within an
evaluation counts as encoding, not as evaluation), and whatever falls in no phase is the rest.
"""

import time
from contextlib import contextmanager

from transformers import TrainerCallback

REST = "rest"
TRAINING_STEPS = "training steps"


class PhaseTimer:
    def __init__(self):
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self._open: list[tuple[str, float, float]] = []  # (phase, start, seconds of the phases inside it)

    def begin(self, phase: str) -> None:
        self._open.append((phase, time.perf_counter(), 0.0))

    def end(self) -> None:
        phase, start, inner = self._open.pop()
        elapsed = time.perf_counter() - start
        self._count(phase, elapsed - inner)
        self._charge_enclosing(elapsed)

    @contextmanager
    def phase(self, phase: str):
        self.begin(phase)
        try:
            yield
        finally:
            self.end()

    def record(self, phase: str, seconds: float) -> None:
        """`seconds` measured elsewhere (e.g. by a retriever), spent inside the phase now open."""
        self._count(phase, seconds)
        self._charge_enclosing(seconds)

    def breakdown(self) -> dict[str, dict[str, float]]:
        """{phase: {"seconds", "count"}} for every phase, then the rest and the total."""
        total = time.perf_counter() - self.started
        table = {phase: {"seconds": round(seconds, 2), "count": self.counts[phase]} for phase, seconds in self.seconds.items()}
        table[REST] = {"seconds": round(total - sum(self.seconds.values()), 2), "count": 1}
        table["total"] = {"seconds": round(total, 2), "count": 1}
        return table

    def _count(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds
        self.counts[phase] = self.counts.get(phase, 0) + 1

    def _charge_enclosing(self, seconds: float) -> None:
        if self._open:
            phase, start, inner = self._open[-1]
            self._open[-1] = (phase, start, inner + seconds)


class TrainingStepTimer(TrainerCallback):
    """Times the Trainer's optimizer steps (forward, backward, optimizer) as training steps: what it does between
    steps (loading batches, logging, evaluating, saving checkpoints) falls to the phases it calls, or the rest."""

    def __init__(self, timer: PhaseTimer):
        self.timer = timer

    def on_step_begin(self, args, state, control, **kwargs):
        self.timer.begin(TRAINING_STEPS)

    def on_step_end(self, args, state, control, **kwargs):
        self.timer.end()


def breakdown_lines(breakdown: dict[str, dict[str, float]]) -> list[str]:
    """One line per phase: seconds, share of the total, and how many times it ran. Other entries kept beside the
    phases (a run's `encoded_texts` in timings.json) are not phases and are left out."""
    total = breakdown["total"]["seconds"] or 1.0
    return [
        f"{phase:>16}: {row['seconds']:9.1f} s {100 * row['seconds'] / total:5.1f}%  x{row['count']}"
        for phase, row in breakdown.items()
        if isinstance(row, dict) and "seconds" in row
    ]
