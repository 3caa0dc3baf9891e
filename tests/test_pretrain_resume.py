"""An interrupted pretraining run, rerun with the same command, continues from its last whole checkpoint
and ends with the very weights of an uninterrupted one; a finished one, rerun, is left as it is.

Every run here trains the same tiny model for 12 steps with a checkpoint every 4, on the same
real text, seed and tokenizer (a WordPiece vocabulary trained once, passed with --tokenizer_name).
"""

import json
import shutil

import pytest
from safetensors.torch import save_file

from pretrain_helpers import (
    TINY_RUN,
    kill_once_written,
    looks_finished,
    max_abs_difference,
    pretrain,
    run_script,
    script_command,
    weights,
    write_lines,
)
from training.common.output_dir import LOCK_FILE
from training.pretraining.tokenizer import train_wordpiece_tokenizer

STEPS, SAVE_EVERY = 12, 4
NUDGE = 0.01


@pytest.fixture(scope="module")
def command(tmp_path_factory, pretrain_lines):
    """`command(output_dir)` -> the flags of one 12-step run into `output_dir`."""
    data = tmp_path_factory.mktemp("resume-data")
    lines = pretrain_lines(200)
    corpus = write_lines(data / "corpus.txt", lines)
    tokenizer_dir = data / "tokenizer"
    train_wordpiece_tokenizer(lines, vocab_size=2000, model_max_length=512).save_pretrained(tokenizer_dir)

    def flags(output_dir):
        return [
            "--train_file", corpus, "--tokenizer_name", tokenizer_dir, "--output_dir", output_dir, *TINY_RUN,
            "--max_steps", STEPS, "--save_steps", SAVE_EVERY, "--seed", "7",
        ]

    return flags


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, command):
    """The output folder of the run that nothing interrupted."""
    out = tmp_path_factory.mktemp("uninterrupted") / "out"
    assert pretrain(command(out)) == 0
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-12", "checkpoint-8"]
    return out


def global_step(folder) -> int:
    return json.loads((folder / "trainer_state.json").read_text())["global_step"]


@pytest.mark.slow
def test_run_killed_with_sigkill_resumes_to_identical_weights(tmp_path, command, uninterrupted):
    out = tmp_path / "out"
    checkpoint_8_done = out / "checkpoint-8" / "trainer_state.json"
    killed_pid = kill_once_written(script_command(command(out)), checkpoint_8_done, tmp_path / "killed.log", 240)
    assert not looks_finished(out)
    # The killed run's lock file is left behind; its lock died with the process.
    assert (out / LOCK_FILE).read_text().startswith(f"process {killed_pid} on ")

    resumed = run_script(command(out))

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resuming from {out / 'checkpoint-8'}" in resumed.stderr
    assert global_step(out / "checkpoint-12") == STEPS
    assert max_abs_difference(weights(out), weights(uninterrupted)) <= 1e-6
    assert not (out / LOCK_FILE).exists()


@pytest.mark.parametrize("trainer_state", ["absent", "being written"])
def test_checkpoint_cut_short_is_removed_and_the_previous_one_resumed(
    tmp_path, caplog, command, uninterrupted, trainer_state
):
    out = tmp_path / "out"
    # What a kill during the save of checkpoint-12 leaves: checkpoint-8 whole, checkpoint-12 without
    # trainer_state.json (written last) or with only its first bytes, and no final model.
    for name in ("checkpoint-8", "checkpoint-12"):
        shutil.copytree(uninterrupted / name, out / name)
    state = out / "checkpoint-12" / "trainer_state.json"
    if trainer_state == "absent":
        state.unlink()
    else:
        state.write_text(state.read_text()[:40])
    (out / "checkpoint-12" / "model.safetensors").write_bytes(b"truncated")

    assert pretrain(command(out)) == 0

    assert f"Resuming from {out / 'checkpoint-8'}" in caplog.text
    assert global_step(out / "checkpoint-12") == STEPS
    assert max_abs_difference(weights(out / "checkpoint-12"), weights(uninterrupted / "checkpoint-12")) <= 1e-6
    assert max_abs_difference(weights(out), weights(uninterrupted)) <= 1e-6


def test_rerun_continues_from_the_checkpoints_weights_rather_than_starting_over(tmp_path, caplog, command, uninterrupted):
    out = tmp_path / "out"
    # What a kill after checkpoint-8 leaves, with checkpoint-8's weights nudged: a rerun that trained from
    # scratch would end at the uninterrupted weights, one that continued carries the nudge to the end.
    shutil.copytree(uninterrupted / "checkpoint-8", out / "checkpoint-8")
    nudged = {name: tensor + NUDGE for name, tensor in weights(out / "checkpoint-8").items()}
    save_file(nudged, out / "checkpoint-8" / "model.safetensors", metadata={"format": "pt"})

    assert pretrain(command(out)) == 0

    assert f"Resuming from {out / 'checkpoint-8'}" in caplog.text
    assert global_step(out / "checkpoint-12") == STEPS
    # Four AdamW steps at a learning rate of at most 5e-4 move a weight by at most 2e-3.
    assert max_abs_difference(weights(out), weights(uninterrupted)) >= NUDGE - 2e-3


def test_resume_from_checkpoint_continues_a_run_from_another_folder(tmp_path, command, uninterrupted):
    out = tmp_path / "out"

    status = pretrain([*command(out), "--resume_from_checkpoint", uninterrupted / "checkpoint-8"])

    assert status == 0
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-12"]
    assert global_step(out / "checkpoint-12") == STEPS
    assert max_abs_difference(weights(out), weights(uninterrupted)) <= 1e-6


def test_rerunning_a_finished_command_trains_nothing_and_a_larger_max_steps_trains_on(tmp_path, caplog, command, uninterrupted):
    out = tmp_path / "out"
    shutil.copytree(uninterrupted, out)

    assert pretrain(command(out)) == 0

    assert "already holds this run's final model, trained to step 12: nothing to train" in caplog.text
    assert global_step(out) == STEPS and not (out / f"checkpoint-{STEPS + 1}").exists()
    assert max_abs_difference(weights(out), weights(uninterrupted)) == 0

    assert pretrain([*command(out), "--max_steps", STEPS + 2]) == 0

    assert f"Resuming from {out / f'checkpoint-{STEPS}'}" in caplog.text
    assert global_step(out) == STEPS + 2


def test_a_run_stopped_after_its_last_checkpoint_is_finished_from_it_without_a_step_more(
    tmp_path, caplog, command, uninterrupted
):
    out = tmp_path / "out"
    # What a run stopped after writing checkpoint-12, before its final model, leaves.
    shutil.copytree(uninterrupted / f"checkpoint-{STEPS}", out / f"checkpoint-{STEPS}")

    assert pretrain(command(out)) == 0

    assert global_step(out) == STEPS and not (out / f"checkpoint-{STEPS + 1}").exists()
    assert max_abs_difference(weights(out), weights(uninterrupted)) <= 1e-6
    assert "Wall time: not measured (this run finished from the checkpoint of its last step" in (out / "README.md").read_text()
