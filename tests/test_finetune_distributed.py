"""`accelerate launch --num_processes 2 --cpu training/finetune.py` fine-tunes one model on two CPU processes:
mining and evaluation on the main process, shared with the other; in-batch negatives gathered across both."""

import json
import pytest
import subprocess
import sys
from pathlib import Path

from sentence_transformers import SentenceTransformer

from finetune_helpers import FINETUNE_SCRIPT, TINY_FINETUNE, round_dir, round_examples
from pretrain_helpers import REPO_ROOT, free_port, subprocess_env

ACCELERATE = Path(sys.executable).with_name("accelerate")


@pytest.mark.slow
def test_two_cpu_processes_share_each_step_and_write_one_complete_model(tmp_path, scifact_slice, tiny_seed_dir):
    out = tmp_path / "out"
    command = [
        ACCELERATE, "launch", "--num_processes", "2", "--cpu", "--main_process_port", free_port(),
        FINETUNE_SCRIPT, "--model_name_or_path", tiny_seed_dir, "--data_dir", scifact_slice, "--output_dir", out,
        *TINY_FINETUNE, "--negatives_range_min", "2", "--negatives_range_max", "20", "--max_steps", "2",
    ]

    result = subprocess.run(
        list(map(str, command)), cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600
    )

    assert result.returncode == 0, result.stderr[-3000:]
    assert "relaunching" in result.stderr
    for number in (1, 2):
        state = json.loads((round_dir(out, number) / "trainer_state.json").read_text())
        assert state["global_step"] == 2 and state["train_batch_size"] == 8
        assert round_examples(out, number)
    assert "16 pairs per step (2 process(es))" in (out / "README.md").read_text()
    assert SentenceTransformer(str(out)).encode(["a claim about cells"]).shape == (1, 64)
