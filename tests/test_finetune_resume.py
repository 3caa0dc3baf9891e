"""An interrupted fine-tuning run, rerun with the same command, ends with the very weights of an uninterrupted
one. (With no arguments at all, fine-tuning turns the pretraining main job's ./seed-encoder into ./seed-encoder-st:
`test_main_job.py` runs that chain.)"""

import json
import shutil
import subprocess
import sys

import pytest

from finetune_helpers import FINETUNE_SCRIPT, TINY_FINETUNE, finetune, round_dir
from pretrain_helpers import REPO_ROOT, kill_once_written, max_abs_difference, subprocess_env, weights


def global_step(folder) -> int:
    return json.loads((folder / "trainer_state.json").read_text())["global_step"]


def last_checkpoint(folder):
    complete = [path for path in folder.glob("checkpoint-*") if (path / "trainer_state.json").is_file()]
    return max(complete, key=lambda path: int(path.name.split("-")[1]))


@pytest.fixture(scope="module")
def command(scifact_slice, tiny_seed_dir):
    """`command(output_dir)`: two self-mining rounds with a checkpoint every 2 steps."""

    def flags(output_dir):
        return [
            "--model_name_or_path", tiny_seed_dir, "--data_dir", scifact_slice, "--output_dir", output_dir,
            *TINY_FINETUNE, "--negatives", "self", "--mining_rounds", "2", "--negatives_range_min", "2",
            "--negatives_range_max", "20", "--save_steps", "2",
        ]

    return flags


@pytest.mark.slow
def test_run_killed_in_its_second_round_resumes_to_identical_weights(tmp_path, command):
    uninterrupted = tmp_path / "uninterrupted"
    assert finetune(command(uninterrupted)) == 0
    out = tmp_path / "killed"
    checkpoint = round_dir(out, 2) / "checkpoint-2" / "trainer_state.json"
    kill_once_written(
        [sys.executable, str(FINETUNE_SCRIPT), *map(str, command(out))], checkpoint, tmp_path / "killed.log", 300
    )
    assert not (out / "config.json").exists()
    resumed_from = global_step(last_checkpoint(round_dir(out, 2)))

    resumed = subprocess.run(
        [sys.executable, str(FINETUNE_SCRIPT), *map(str, command(out))],
        cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600,
    )

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((round_dir(out, 1) / "examples.json").read_text()) == json.loads(
        (round_dir(uninterrupted, 1) / "examples.json").read_text()
    )
    assert max_abs_difference(weights(out), weights(uninterrupted)) <= 1e-6
    # Round 1 was whole and round 2 continued from its checkpoint: the rerun trained only the steps after it.
    round_two_steps = global_step(round_dir(uninterrupted, 2))
    assert resumed.stdout.count("{'loss'") == round_two_steps - resumed_from


def test_a_round_stopped_after_its_last_checkpoint_is_finished_from_it_without_a_step_more(
    tmp_path, scifact_slice, tiny_seed_dir, capsys
):
    def flags(output_dir):
        return [
            "--model_name_or_path", tiny_seed_dir, "--data_dir", scifact_slice, "--output_dir", output_dir,
            *TINY_FINETUNE, "--negatives", "none", "--max_steps", "4", "--save_steps", "2",
        ]

    uninterrupted = tmp_path / "uninterrupted"
    assert finetune(flags(uninterrupted)) == 0
    # What a run stopped after writing checkpoint-4, before the round's model and the final folder, leaves.
    out = tmp_path / "stopped"
    shutil.copytree(uninterrupted / "finetuning", out / "finetuning")
    stopped_round = round_dir(out, 1)
    shutil.rmtree(stopped_round / "model")
    for name in ("dev_metrics.json", "trainer_state.json"):
        (stopped_round / name).unlink()
    capsys.readouterr()

    assert finetune(flags(out)) == 0

    assert capsys.readouterr().out.count("{'loss'") == 0
    assert global_step(stopped_round) == 4 and not (stopped_round / "checkpoint-5").exists()
    assert json.loads((stopped_round / "dev_metrics.json").read_text()) == json.loads(
        (round_dir(uninterrupted, 1) / "dev_metrics.json").read_text()
    )
    assert max_abs_difference(weights(out), weights(uninterrupted)) <= 1e-6


def test_a_folder_holding_another_run_is_refused(tmp_path, command, capsys):
    out = tmp_path / "other"
    (out / "finetuning").mkdir(parents=True)
    (out / "finetuning" / "run.json").write_text(json.dumps({"recipe": {"negatives": "none"}}))

    assert finetune(command(out)) == 2

    assert "holds a different fine-tuning run" in capsys.readouterr().err

