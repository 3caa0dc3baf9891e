"""`accelerate launch --num_processes 2 --cpu training/pretrain.py` trains one model on two CPU processes.

accelerate's CPU launcher alone starts one process; the script re-executes itself under
torch.distributed.run, so two ranks (a gloo world of size 2) share each optimizer step.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoModel

import modeling_seed
from pretrain_helpers import PRETRAIN_SCRIPT, REPO_ROOT, TINY_RUN, free_port, subprocess_env

ACCELERATE = Path(sys.executable).with_name("accelerate")


@pytest.mark.slow
def test_two_cpu_processes_share_each_step_and_write_one_complete_model(tmp_path):
    out = tmp_path / "out"
    command = [
        ACCELERATE, "launch", "--num_processes", "2", "--cpu", "--main_process_port", free_port(),
        PRETRAIN_SCRIPT, "--output_dir", out, *TINY_RUN, "--max_steps", "4", "--save_steps", "4",
    ]

    result = subprocess.run(
        list(map(str, command)), cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300
    )

    assert result.returncode == 0, result.stderr[-3000:]
    assert "relaunching" in result.stderr
    # 2 processes x 8 sequences: 4 steps take 64 of the 200 passages, 4 of the 13 steps of an epoch.
    metrics = json.loads((out / "all_results.json").read_text())
    assert metrics["global_step"] == 4
    assert metrics["epoch"] == pytest.approx(4 / 13)
    assert "- Batch: 16 sequences per step (2 process(es))" in (out / "README.md").read_text()
    checkpoint = out / "checkpoint-4"
    assert {"rng_state_0.pth", "rng_state_1.pth", "trainer_state.json"} <= {p.name for p in checkpoint.iterdir()}
    assert {"modeling_seed.py", "configuration_seed.py", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in out.iterdir()
    }
    assert not (out / ".final-model-incomplete").exists()
    encoder = AutoModel.from_pretrained(out)
    assert isinstance(encoder, modeling_seed.SeedEncoderModel)
    assert encoder.config.hidden_size == 64
