"""The benchmarks read the package through its public names: never a private one (a leading underscore) nor a
constant of a run folder's layout (`*_FILE`, `*_DIR`, `*_PLOT`, `*_STATE`), which the pipelines may change. A run's
folder is read through `training.finetuning.run_folder.FinetuningRun`."""

import ast
import re
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))
LAYOUT_CONSTANT = re.compile(r"\w+_(FILE|DIR|PLOT|STATE)$")


def names_imported_from_training(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "training"
        for alias in node.names
    ]


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda path: path.name)
def test_a_benchmark_imports_no_private_name_nor_a_run_folder_layout_constant(path):
    offending = [name for name in names_imported_from_training(path) if name.startswith("_") or LAYOUT_CONSTANT.match(name)]

    assert not offending, f"{path.name} imports {', '.join(offending)} from training/"
