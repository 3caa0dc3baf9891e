"""The same pretraining command, run twice, writes the same model: the WordPiece vocabulary it trains
on the corpus and every weight, byte for byte, whatever the processes' hash seeds."""

import subprocess
import pytest

import torch

from pretrain_helpers import REPO_ROOT, TINY_RUN, script_command, subprocess_env, weights, write_lines


@pytest.mark.slow
def test_same_command_in_two_processes_writes_identical_tokenizer_and_weights(pretrain_lines, tmp_path):
    corpus = write_lines(tmp_path / "corpus.txt", pretrain_lines(200))
    outputs = [tmp_path / "first", tmp_path / "second"]
    # A new model, a tokenizer trained on the corpus, a few steps; both runs at once, with different hash seeds.
    runs = [
        subprocess.Popen(
            script_command(["--train_file", corpus, "--output_dir", out, *TINY_RUN, "--max_steps", "3",
                            "--save_strategy", "no", "--seed", "5"]),
            cwd=REPO_ROOT, env=subprocess_env(PYTHONHASHSEED=hash_seed),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        for out, hash_seed in zip(outputs, ["1", "2"])
    ]
    for run in runs:
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr[-3000:]

    first, second = outputs
    assert (first / "tokenizer.json").read_bytes() == (second / "tokenizer.json").read_bytes()
    assert (first / "config.json").read_text() == (second / "config.json").read_text()
    first_weights, second_weights = weights(first), weights(second)
    assert first_weights.keys() == second_weights.keys()
    for name, tensor in first_weights.items():
        assert torch.equal(tensor, second_weights[name]), name
