"""What the quality benchmarks share: resumable results, running the pipelines' scripts, timing, tables.

A benchmark is a list of steps (pre-train this, fine-tune that, evaluate those); each finished
step's result is kept in a JSON file, so an interrupted benchmark rerun with the same command
skips what is done, and the pipelines themselves resume their own output folders.
"""

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from training.common.models import load_sentence_transformer, load_sparse_encoder
from training.evaluation.arguments import EvaluationArguments
from training.evaluation.evaluator import model_retriever
from training.evaluation.retrievers import DenseRetriever, SparseRetriever

ENCODING_BATCH_SIZE = EvaluationArguments.batch_size  # training/evaluate.py's --batch_size default


class ResultStore:
    """Finished steps' results by key, in a JSON file rewritten atomically after every step. A `read_only` store
    runs nothing: a step it does not hold is None."""

    def __init__(self, path: Path, read_only: bool = False):
        self.path = path
        self.read_only = read_only
        self.results = json.loads(path.read_text()) if path.is_file() else {}

    def get_or_run(self, key: str, step: Callable[[], dict]) -> dict | None:
        """The stored result of `key`, or run `step` (printing its progress and wall time) and store what it returns."""
        if key in self.results:
            print(f"[{key}] done earlier: {printable(self.results[key])}", flush=True)
            return self.results[key]
        if self.read_only:
            return None
        print(f"[{key}] running ...", flush=True)
        start = time.perf_counter()
        result = {**step(), "seconds": round(time.perf_counter() - start, 1)}
        self.results[key] = result
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps(self.results, indent=2))
        temporary.replace(self.path)
        print(f"[{key}] {printable(result)}", flush=True)
        return result


def changed_settings(recorded: dict, settings: dict) -> dict[str, tuple]:
    """{name: (recorded, given)} for each of `settings` that differs from what a work folder's settings.json
    `recorded`: a benchmark refuses to add results measured otherwise to those it holds."""
    return {name: (recorded.get(name), value) for name, value in settings.items() if recorded.get(name) != value}


def printable(result: dict) -> dict:
    """A step's figures for its log line: a per-query table (hundreds of entries) is kept in the store, not printed."""
    return {name: value for name, value in result.items() if not isinstance(value, dict)}


def run_script(main: Callable[[list[str]], int], argv: list) -> None:
    """A pipeline script's `main` with `argv`, in this process; a refused run stops the benchmark."""
    status = main([str(arg) for arg in argv])
    if status != 0:
        sys.exit(f"a benchmark step failed (exit status {status}): {' '.join(map(str, argv))}")


RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def recipe(name: str) -> list[str]:
    """The flags that run the named recipe file (recipes/NAME.yaml): benchmarks run the recipes users run."""
    return ["--config", str(RECIPES / f"{name}.yaml")]


def precision_flags() -> list[str]:
    """bf16 where it is fast: a CUDA GPU that supports it, or a CPU with AVX512-BF16 (elsewhere on a CPU bf16
    is emulated and ~25x slower, so fp32 is kept)."""
    if torch.cuda.is_available():
        return ["--bf16"] if torch.cuda.is_bf16_supported() else []
    cpu_flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    return ["--bf16", "--use_cpu"] if "avx512_bf16" in cpu_flags else []


def dense_retriever(
    path: Path, name: str, cache_dir: Path, pooling: str | None = None, max_seq_length: int | None = None
) -> DenseRetriever:
    """A dense model folder's retriever, its corpus embeddings cached across steps under its weights' identity (as
    `training/evaluate.py` and `training/finetune.py` key them, so a run given the same --cache_dir shares them)."""
    model = load_sentence_transformer(str(path), pooling=pooling, max_seq_length=max_seq_length)
    return model_retriever(model, name, ENCODING_BATCH_SIZE, str(cache_dir))


def sparse_retriever(path: Path, name: str, cache_dir: Path | None = None, max_seq_length: int | None = None) -> SparseRetriever:
    """A sparse model folder's retriever; with `cache_dir`, its encoded corpus cached as `dense_retriever`'s is."""
    model = load_sparse_encoder(str(path), max_seq_length=max_seq_length)
    return model_retriever(model, name, ENCODING_BATCH_SIZE, None if cache_dir is None else str(cache_dir))


def interleaved_seconds(contenders: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Seconds of each contender in each round; within a round the contenders run one after another, in turn
    first, so that load from other processes hits them alike."""
    seconds = {name: [] for name in contenders}
    for number in range(rounds):
        names = list(contenders)[number % len(contenders):] + list(contenders)[: number % len(contenders)]
        for name in names:
            start = time.perf_counter()
            contenders[name]()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def ratio_cell(numerators: list[float], denominators: list[float]) -> str:
    """Median [min-max] of the per-round ratios."""
    ratios = [n / d for n, d in zip(numerators, denominators)]
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"


def mean_and_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for a single value)."""
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else None


def mean_std(values: list[float], digits: int = 3) -> str:
    mean, std = mean_and_std(values)
    return f"{mean:.{digits}f}" if std is None else f"{mean:.{digits}f} ± {std:.{digits}f}"


def markdown_table(columns: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def limit_threads() -> None:
    """Tokenizers' own thread pool fights torch's for the cores; benchmarks keep it off."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def status_kib(field: str) -> int:
    """A memory figure of this process from /proc/self/status (VmRSS, VmHWM, RssAnon...), in KiB (Linux)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field} line; CPU peak memory needs Linux.")


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0), so that a peak read later is a later step's own; False when the
    kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False
