"""What the `test_pretrain_*` specifications share: the script, a tiny model shape, and ways to run it.

A run is either `pretrain(argv)` (the script's `main`, in this process: fast, for most specs) or
`run_script(argv)` (a real `python training/pretrain.py` subprocess: for exit statuses, kills and
launchers). Both take the same flags.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from safetensors.torch import load_file

from training.pretrain import main

REPO_ROOT = Path(__file__).resolve().parents[1]
PRETRAIN_SCRIPT = REPO_ROOT / "training" / "pretrain.py"

# A model that trains a step in a fraction of a second on one CPU thread.
TINY_MODEL = "hidden_size=64,num_hidden_layers=2,num_attention_heads=2,intermediate_size=128"
TINY_RUN = [
    "--config_overrides", TINY_MODEL,
    "--max_train_samples", "200",
    "--per_device_train_batch_size", "8",
    "--validation_split_percentage", "0",
    "--logging_steps", "1",
    "--report_to", "none",
    "--dataloader_pin_memory", "false",
]


def pretrain(argv: list[str]) -> int:
    """`python training/pretrain.py ARGV`, in this process: 0 on success, 2 on bad input."""
    return main([str(arg) for arg in argv])


def subprocess_env(**variables: str) -> dict[str, str]:
    """The current environment plus `variables`, with one thread per process (tiny models; a shared, busy CPU)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", **variables}


def printed_together(program: str, processes: int = 2, **variables: str) -> str:
    """What `processes` Python processes running `program` at once printed, all of them, once each has succeeded
    (the environment plus `variables`)."""
    started = [
        subprocess.Popen(
            [sys.executable, "-c", program], env=subprocess_env(**variables), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        for _ in range(processes)
    ]
    outputs = [process.communicate(timeout=180) for process in started]
    assert [process.returncode for process in started] == [0] * processes, [error[-2000:] for _, error in outputs]
    return "".join(output for output, _ in outputs)


def script_command(argv: list[str]) -> list[str]:
    return [sys.executable, str(PRETRAIN_SCRIPT), *map(str, argv)]


def run_script(argv: list[str], timeout: float = 240, **variables: str) -> subprocess.CompletedProcess:
    """`python training/pretrain.py ARGV` as a real subprocess, run from the repository root, with the
    environment variables `variables` set."""
    return subprocess.run(
        script_command(argv), cwd=REPO_ROOT, env=subprocess_env(**variables), capture_output=True, text=True,
        timeout=timeout,
    )


def is_whole_json(path: Path) -> bool:
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True


def kill_once_written(command: list[str], marker: Path, log_path: Path, timeout: float) -> int:
    """Start `command` (a script run from the repository root, its output in `log_path`) and `kill -9` it as soon
    as `marker`, a JSON file, is whole; returns the killed process's id."""
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=subprocess_env(), stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while not is_whole_json(marker):
            assert process.poll() is None, f"the run ended (status {process.returncode}) before it wrote {marker}"
            assert time.monotonic() < deadline, f"no {marker} within {timeout} s"
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL
    return process.pid


def free_port() -> int:
    """A TCP port nothing listens on now, for a launcher's rendezvous."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def weights(folder: Path) -> dict:
    """Every tensor of `folder/model.safetensors`, by name."""
    return load_file(str(folder / "model.safetensors"))


def max_abs_difference(first: dict, second: dict) -> float:
    assert first.keys() == second.keys()
    return max(float((first[name].float() - second[name].float()).abs().max()) for name in first)


def looks_finished(folder: Path) -> bool:
    """Whether `folder` holds something a loader would take for a final model."""
    return (folder / "config.json").exists() or (folder / "model.safetensors").exists()
