"""A Python environment without seed-encoder: what a user who only has the published folders runs.

`plain_environment(folder)` makes a fresh virtual environment that holds torch, transformers and
sentence-transformers with their dependencies and nothing else: no seed-encoder, no accelerate, no datasets.
`plain_environment(folder, ONNX_REQUIREMENTS)` holds what an ONNX export's loader needs, and no torch.
The distributions are linked from the suite's own site-packages (the same files, found through the same
dependency metadata pip resolves), so the environment costs a second to build and no download or copy.
`run_in(python, program, cwd)` runs a program there, offline, from a folder outside the repository.
"""

import json
import os
import re
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

PLAIN_REQUIREMENTS = ("torch", "transformers", "sentence-transformers")
ONNX_REQUIREMENTS = ("onnxruntime", "tokenizers", "numpy")


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dependency_closure(requirements) -> list[metadata.Distribution]:
    """The installed distributions `requirements` need, theirs included (markers evaluated, no extras)."""
    found, pending = {}, [Requirement(requirement) for requirement in requirements]
    while pending:
        requirement = pending.pop()
        name = _normalised(requirement.name)
        if name in found or (requirement.marker is not None and not requirement.marker.evaluate({"extra": ""})):
            continue
        try:
            distribution = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            continue  # not needed here (pip would have installed it otherwise)
        found[name] = distribution
        pending += [Requirement(line) for line in distribution.requires or []]
    return list(found.values())


def plain_environment(folder: Path, requirements: tuple[str, ...] = PLAIN_REQUIREMENTS) -> Path:
    """The python executable of a new virtual environment in `folder` with only `requirements` and what they need."""
    venv.EnvBuilder(symlinks=True, with_pip=False).create(folder)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site_packages = folder / "lib" / version / "site-packages"
    for distribution in dependency_closure(requirements):
        top_level = {Path(file).parts[0] for file in distribution.files or [] if not str(file).startswith("..")}
        for entry in top_level - {"__pycache__"}:
            source = Path(distribution.locate_file(entry))
            if source.exists() and not (site_packages / entry).exists():
                (site_packages / entry).symlink_to(source)
    return folder / "bin" / "python"


def run_in(python: Path, program: str, cwd: Path, timeout: float = 180) -> dict:
    """Run `program` with `python`, offline, in `cwd`, with no variable of this session's Python set-up; returns the
    JSON object it prints last."""
    environment = {
        "PATH": "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(cwd / "hf-home"),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    result = subprocess.run(
        [str(python), "-c", program], cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
