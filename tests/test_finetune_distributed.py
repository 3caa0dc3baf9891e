"""`accelerate launch --num_processes 2 --cpu training/finetune.py` fine-tunes one model on two CPU processes:
in-batch negatives gathered across both; evaluation, mining and scoring on the main process, each process encoding
half of every corpus and query set; the same examples and metrics as one process."""

import json
import pytest
import subprocess
import sys
from pathlib import Path

from sentence_transformers import SentenceTransformer

from evaluation_helpers import cut_scifact
from finetune_helpers import FINETUNE_SCRIPT, TINY_FINETUNE, finetune, round_dir
from pretrain_helpers import REPO_ROOT, free_port, subprocess_env
from training.data.collection import load_collection
from training.finetuning.data import training_set_from_beir
from training.finetuning.run_folder import FinetuningRun

ACCELERATE = Path(sys.executable).with_name("accelerate")


def encoded_texts(output_dir: Path) -> dict[str, list[list[int]]]:
    """{phase: one [texts of process 0, of process 1, ...] per encoding}, as the run kept it."""
    return json.loads((output_dir / "finetuning" / "timings.json").read_text())["encoded_texts"]


@pytest.fixture(scope="module")
def scifact_cut(shared_data_dir, tmp_path_factory) -> Path:
    """30 training and 10 test queries of SciFact, every document they judge and 20 others: 54 documents."""
    return cut_scifact(shared_data_dir / "scifact", tmp_path_factory.mktemp("scifact-cut"), {"train": 30, "test": 10}, 20)


@pytest.mark.slow
def test_two_cpu_processes_share_each_step_and_encoding_and_agree_with_one(tmp_path, scifact_cut, minilm_dir):
    # all-MiniLM-L6-v2, whose scores spread, so that a ranking is not float noise. Weights trained on one and on two
    # processes differ by float noise that Adam's first step (its gradient's sign, times the learning rate) makes a
    # whole step, and their negatives would differ with them: at a learning rate of 1e-12, below float32's resolution
    # for all but the tiniest weights, round 2 mines the same model's own index in both runs. That index is encoded at
    # 32 tokens (the evaluations at 64), so mining encodes the corpus as well as the queries. (The later flags override
    # TINY_FINETUNE's.) A candidate start, the same weights in another folder, is scored on the dev split too.
    candidate = tmp_path / "candidate"
    candidate.symlink_to(minilm_dir, target_is_directory=True)
    arguments = [
        "--model_name_or_path", minilm_dir, "--candidate_starts", candidate, "--data_dir", scifact_cut, *TINY_FINETUNE, "--learning_rate", "1e-12",
        "--max_seq_length", "32", "--published_max_seq_length", "64", "--negatives", "self",
        "--negatives_range_min", "2", "--negatives_range_max", "20", "--max_steps", "2", "--eval_split", "test",
    ]
    two, one = tmp_path / "two", tmp_path / "one"
    command = [
        ACCELERATE, "launch", "--num_processes", "2", "--cpu", "--main_process_port", free_port(), FINETUNE_SCRIPT,
        *arguments, "--output_dir", two, "--cache_dir", tmp_path / "cache-two",
    ]

    result = subprocess.run(
        list(map(str, command)), cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600
    )
    assert finetune([*arguments, "--output_dir", one, "--cache_dir", tmp_path / "cache-one"]) == 0

    assert result.returncode == 0, result.stderr[-3000:]
    assert "relaunching" in result.stderr
    for number in (1, 2):
        state = json.loads((round_dir(two, number) / "trainer_state.json").read_text())
        assert state["global_step"] == 2 and state["train_batch_size"] == 8
        assert FinetuningRun(two).round_examples(number) == FinetuningRun(one).round_examples(number), number
        # Evaluated by the trainer at 64 tokens, the processes' slices as well (they train at 32).
        dev_metrics = [FinetuningRun(run).round(number).dev_metrics() for run in (two, one)]
        assert dev_metrics[0] == pytest.approx(dev_metrics[1]), number
    assert FinetuningRun(two).start_dev_metrics == pytest.approx(FinetuningRun(one).start_dev_metrics)
    test_metrics = [json.loads((run / "finetuning" / "test_metrics.json").read_text()) for run in (two, one)]
    assert test_metrics[0] == pytest.approx(test_metrics[1])
    # Each process encodes half of every set: at the start the corpus and the dev queries, then the candidate's dev
    # queries (its corpus, the same weights', read from the cache), in round 2's mining the corpus (the own index at
    # 32 tokens: not in the cache) and the training queries, then the test queries (the corpus read from the cache).
    # One process shares nothing, and counts nothing.
    training_set = training_set_from_beir(str(scifact_cut), 0.1, None, seed=3)  # --dev_fraction's default
    test_queries = load_collection(str(scifact_cut), "test").queries
    corpus = len(training_set.corpus)
    shared = encoded_texts(two)
    assert {phase: [sum(shares) for shares in encodings] for phase, encodings in shared.items()} == {
        "start evaluation": [corpus, len(training_set.dev.queries), len(training_set.dev.queries)],
        "round 2 mining": [corpus, len(training_set.queries)],
        "test evaluation": [len(test_queries)],
    }
    assert all(max(shares) - min(shares) <= 1 for encodings in shared.values() for shares in encodings), shared
    assert encoded_texts(one) == {}
    assert "16 pairs per step (2 process(es))" in (two / "README.md").read_text()
    assert SentenceTransformer(str(two)).encode(["a claim about cells"]).shape == (1, 384)
