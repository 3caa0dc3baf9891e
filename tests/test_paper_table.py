"""`benchmarks/paper_table.py`: the paper's ablation table, end to end at the smoke budget on a slice of SciFact.

The table is made twice in one work folder, as a user resuming or extending it would: first with seed 1, then
with seeds 1 and 2, which must redo nothing of seed 1.
"""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from finetune_helpers import round_examples
from pretrain_helpers import subprocess_env
from training.finetuning.data import training_set_from_beir

REPO_ROOT = Path(__file__).resolve().parents[1]
PAPER_TABLE = REPO_ROOT / "benchmarks" / "paper_table.py"
ARMS = {"mlm-only": (None, None), "decoder-3-span-2": (3, 2), "decoder-3-span-full": (3, None)}
FEW_SHOT = ("8", "all")
EVALUATIONS = ("zero-shot", "k=8", "k=all")
COLUMNS = [
    "cls_information",
    *(f"{evaluation} {metric}" for evaluation in EVALUATIONS for metric in ("ndcg@10", "recall@100")),
    "pretraining seconds",
    "arm seconds",
]
DEV_FRACTION = 0.1  # the fine-tuning default the table keeps


def run_table(argv: list) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(PAPER_TABLE), *map(str, argv)], cwd=REPO_ROOT, env=subprocess_env(),
        capture_output=True, text=True, timeout=600,
    )


@pytest.fixture(scope="module")
def table(scifact_slice, tmp_path_factory):
    """The smoke table of the three main arms, from scratch: seed 1 alone, then seeds 1 and 2 in the same folder."""
    folder = tmp_path_factory.mktemp("paper-table")
    argv = ["--data_dir", scifact_slice, "--budget", "smoke", "--work_dir", folder / "work", "--few_shot", *FEW_SHOT]
    first = run_table([*argv, "--seeds", "1", "--output_json", folder / "seed-1.json"])
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    second = run_table([*argv, "--seeds", "1", "2", "--output_json", folder / "table.json"])
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    return SimpleNamespace(
        work=folder / "work", data_dir=scifact_slice, first=first, second=second,
        first_json=json.loads((folder / "seed-1.json").read_text()), json=json.loads((folder / "table.json").read_text()),
    )


def test_the_table_reports_every_arm_and_column_over_both_seeds(table):
    rows = table.json["arms"]
    assert [row["key"] for row in rows] == list(ARMS)
    for row in rows:
        assert list(row["summary"]) == COLUMNS
        assert sorted(row["per_seed"]) == ["1", "2"]
        for column, summary in row["summary"].items():
            if column == "cls_information" and row["key"] == "mlm-only":
                assert summary["seeds"] == 0 and summary["mean"] is None  # no decoder, nothing to measure
                continue
            assert summary["seeds"] == 2, (row["key"], column)
            assert isinstance(summary["mean"], float) and isinstance(summary["std"], float)
            if column.endswith("seconds"):
                assert summary["mean"] > 0
            elif column != "cls_information":
                assert 0 <= summary["mean"] <= 1
    markdown_rows = table.json["markdown"].splitlines()[2:]
    assert len(markdown_rows) == len(ARMS)
    assert markdown_rows[0].split(" | ")[1] == "n/a"
    assert all(" ± " in row for row in markdown_rows)
    assert table.json["markdown"] in table.second.stdout


def test_each_few_shot_fine_tuning_trains_every_arm_on_the_same_k_queries_drawn_with_the_seed(table):
    drawn = {}
    for seed in (1, 2):
        training_queries = len(training_set_from_beir(str(table.data_dir), DEV_FRACTION, None, seed).queries)
        for k, expected in (("8", 8), ("all", training_queries)):
            per_arm = [
                {query_id for query_id, _, _ in round_examples(table.work / arm / f"seed-{seed}" / f"finetuned-k{k}", 1)}
                for arm in ARMS
            ]
            assert all(queries == per_arm[0] for queries in per_arm), (seed, k)
            assert len(per_arm[0]) == expected, (seed, k)
            drawn[seed, k] = per_arm[0]
    assert drawn[1, "8"] != drawn[2, "8"]


def test_the_arms_differ_only_in_their_decoder(table):
    for seed in (1, 2):
        folders = {arm: table.work / arm / f"seed-{seed}" / "pretrained" for arm in ARMS}
        configs = {arm: json.loads((folder / "config.json").read_text()) for arm, folder in folders.items()}
        for arm, (layers, span) in ARMS.items():
            config = configs[arm]
            if layers is None:
                assert config["decoder_loss_weight"] == 0
            else:
                assert (config["decoder_loss_weight"], config["decoder_num_layers"]) == (1.0, layers)
                assert config["decoder_attention_span"] == span
        decoder_fields = ("decoder_loss_weight", "decoder_num_layers", "decoder_attention_span")
        shapes = [{k: v for k, v in config.items() if k not in decoder_fields} for config in configs.values()]
        assert all(shape == shapes[0] for shape in shapes)
        shared_tokenizer = (table.work / "tokenizer" / "tokenizer.json").read_bytes()
        assert all((folder / "tokenizer.json").read_bytes() == shared_tokenizer for folder in folders.values())
        states = [json.loads((folder / "trainer_state.json").read_text()) for folder in folders.values()]
        assert {(state["max_steps"], state["train_batch_size"], state["global_step"]) for state in states} == {
            (states[0]["max_steps"], states[0]["train_batch_size"], states[0]["max_steps"])
        }


def test_a_rerun_keeps_the_finished_steps_and_runs_only_the_new_ones(table):
    steps = ("pretraining", *EVALUATIONS)
    for arm in ARMS:
        for step in steps:
            assert f"[{arm}/seed-1/{step}] done earlier" in table.second.stdout
            assert f"[{arm}/seed-1/{step}] running" not in table.second.stdout
            assert f"[{arm}/seed-2/{step}] running" in table.second.stdout
    for first_row, row in zip(table.first_json["arms"], table.json["arms"]):
        assert row["per_seed"]["1"] == first_row["per_seed"]["1"]


def test_a_work_folder_holding_a_table_of_other_settings_is_refused(table):
    results_before = (table.work / "results.json").read_text()

    refused = run_table(["--data_dir", table.data_dir, "--budget", "cpu-hour", "--work_dir", table.work])

    assert refused.returncode == 2
    assert f"--work_dir {table.work}" in refused.stderr and "budget" in refused.stderr
    assert (table.work / "results.json").read_text() == results_before
