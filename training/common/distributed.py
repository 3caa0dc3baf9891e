"""Several processes: make `accelerate launch --num_processes N --cpu` start N of them, and run work on the main
process alone with its result sent to every process (`on_main_process`).

accelerate 1.x starts several CPU processes only through `mpirun` (with `--mpirun_hostfile`);
without it, its launcher starts ONE process and only sets MASTER_ADDR/MASTER_PORT. The script
then re-executes itself under `torch.distributed.run`, which forms a gloo world of N ranks that
Accelerate (and so the Trainer) sees as one data-parallel job.
"""

import os
import sys

import torch
from pathlib import Path

from accelerate import PartialState
from accelerate.utils import broadcast_object_list

WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def _requested_num_processes(launcher_command: list[str]) -> int | None:
    for index, argument in enumerate(launcher_command):
        if argument.startswith("--num_processes=") or argument.startswith("--num-processes="):
            return int(argument.split("=", 1)[1])
        if argument in ("--num_processes", "--num-processes") and index + 1 < len(launcher_command):
            return int(launcher_command[index + 1])
    return None


def _parent_command() -> list[str]:
    try:
        raw = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def relaunch_cpu_processes_if_requested() -> None:
    """Re-execute under torch.distributed.run when accelerate's CPU launcher was asked for N > 1 processes."""
    started_by_cpu_launcher = os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true" and "MASTER_ADDR" in os.environ
    if not started_by_cpu_launcher or any(name in os.environ for name in WORLD_SIZE_VARIABLES):
        return
    num_processes = _requested_num_processes(_parent_command())
    if not num_processes or num_processes < 2:
        return
    command = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nproc_per_node={num_processes}",
        f"--master_addr={os.environ['MASTER_ADDR']}",
        f"--master_port={os.environ.get('MASTER_PORT', '29500')}",
        sys.argv[0], *sys.argv[1:],
    ]
    print(f"accelerate started one CPU process for {num_processes}; relaunching: {' '.join(command)}", file=sys.stderr)
    sys.stdout.flush()
    os.execv(sys.executable, command)


def distributed_state() -> PartialState:
    """This process's place in the run (`process_index`, `num_processes`, `device`), with the processes' group formed
    the first time it is asked for where a launcher started several (the Trainer's arguments form it themselves)."""
    # Told nothing, accelerate treats processes on a machine without an accelerator as one each; the Trainer's
    # arguments ask for CPU processes in the same two cases.
    on_cpu = os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true" or not torch.accelerator.is_available()
    return PartialState(cpu=on_cpu)


def on_main_process(work):
    """`work()` run by the main process alone, its result sent to every process: work that encodes nothing (work
    that encodes runs in `SharedEncoding.run`)."""
    state = distributed_state()
    result = [work() if state.is_main_process else None]
    if state.num_processes > 1:
        broadcast_object_list(result, from_process=0)
    return result[0]
