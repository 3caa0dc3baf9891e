"""One run per output folder: while a run writes to `--output_dir`, another run on it stops at once, on
every rank, with exit status 2 and an error naming the folder and the holder's process, and writes
nothing there. The lock is the operating system's, so it dies with its holder (see the `kill -9`
resume in test_pretrain_resume.py), and the lock file alone is not content of the folder."""

import json
import pytest
import os
import signal
import socket
import subprocess
import sys
import time

from pretrain_helpers import (
    PRETRAIN_SCRIPT,
    REPO_ROOT,
    TINY_RUN,
    free_port,
    pretrain,
    run_script,
    script_command,
    subprocess_env,
    write_lines,
)
from training.common.output_dir import LOCK_FILE


def wait_for(path, process, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, f"the run ended (status {process.returncode}) before {path.name} appeared"
        assert time.monotonic() < deadline, f"no {path} within {timeout} s"
        time.sleep(0.02)


@pytest.mark.slow
def test_run_on_a_folder_in_use_is_refused_on_every_rank_and_the_first_run_finishes_alone(tmp_path, pretrain_lines):
    corpus = write_lines(tmp_path / "corpus.txt", pretrain_lines(200))
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("replaced by the first run\n")
    first_run = ["--train_file", corpus, "--output_dir", out, *TINY_RUN, "--max_steps", "4", "--save_steps", "2",
                 "--seed", "1", "--overwrite_output_dir"]
    other_run = ["--train_file", corpus, "--output_dir", out, *TINY_RUN, "--max_steps", "3", "--save_steps", "3",
                 "--seed", "2"]
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(script_command(first_run), cwd=REPO_ROOT, env=subprocess_env(), stdout=log, stderr=log)
    try:
        # Past clearing the folder and into training: then hold it still while the others try.
        wait_for(out / "checkpoint-2" / "trainer_state.json", first)
        os.kill(first.pid, signal.SIGSTOP)
        try:
            overwriting = run_script([*other_run, "--overwrite_output_dir"])
            two_processes = subprocess.run(
                [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                 str(free_port()), str(PRETRAIN_SCRIPT), *map(str, other_run), "--use_cpu"],
                cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=240,
            )
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert first.wait(timeout=240) == 0, (tmp_path / "first.log").read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()

    refusal = (
        f"error: --output_dir {out}: another run (process {first.pid} on {socket.gethostname()}) is writing to this "
        "folder, and two runs in one folder would mix their checkpoints."
    )
    assert overwriting.returncode == 2
    assert overwriting.stderr.strip().splitlines()[-1].startswith(refusal)
    assert "Traceback" not in overwriting.stderr
    assert two_processes.returncode != 0
    assert two_processes.stderr.count(refusal) == 2, two_processes.stderr[-3000:]
    assert sorted(path.name for path in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert not (out / "notes.txt").exists()
    assert "seed 1" in (out / "README.md").read_text()
    assert json.loads((out / "all_results.json").read_text())["global_step"] == 4
    assert json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())["max_steps"] == 4


def test_lock_file_left_by_a_killed_run_is_not_content_of_the_folder(tmp_path, pretrain_lines):
    corpus = write_lines(tmp_path / "corpus.txt", pretrain_lines(40))
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).write_text("process 4242 on a-node-that-died\n")

    status = pretrain(["--train_file", corpus, "--output_dir", out, *TINY_RUN, "--max_steps", "2", "--save_steps", "2"])

    assert status == 0
    assert (out / "config.json").is_file()
    assert not (out / LOCK_FILE).exists()
