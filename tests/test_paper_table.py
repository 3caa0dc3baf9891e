"""`benchmarks/paper_table.py`: the paper's ablation table, end to end at the smoke budget on slices of SciFact.

From scratch, the table is made twice in one work folder, as a user resuming or extending it would: first with seed
1, then with seeds 1 and 2, which must redo nothing of seed 1; few-shot with k = 8 queries. Continuing splade-tiny (a
trained encoder), it is made on a smaller slice (SPLADE over a 30,522-token vocabulary is slow on a CPU) with one seed
and few-shot on all training queries, then rerun.
"""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from evaluation_helpers import cut_scifact
from finetune_helpers import round_examples
from pretrain_helpers import subprocess_env
from training.data.collection import load_collection
from training.evaluation.evaluate import evaluate_retriever
from training.evaluation.retrievers import DenseRetriever
from training.common.models import load_sentence_transformer
from training.finetuning.data import training_set_from_beir

REPO_ROOT = Path(__file__).resolve().parents[1]
PAPER_TABLE = REPO_ROOT / "benchmarks" / "paper_table.py"
ARMS = {"mlm-only": (None, None), "decoder-3-span-2": (3, 2), "decoder-3-span-full": (3, None)}
FEW_SHOT = ("8",)
KINDS = ("dense", "sparse")
EVALUATIONS = tuple(f"{kind} {shot}" for kind in KINDS for shot in ("zero-shot", "k=8"))
PRETRAINING_COLUMNS = ["cls_information first", "cls_information middle", "cls_information last", "decoder_loss drop"]
COLUMNS = [
    *PRETRAINING_COLUMNS,
    *(f"{evaluation} {metric}" for evaluation in EVALUATIONS for metric in ("ndcg@10", "recall@100")),
    "pretraining seconds",
    "arm seconds",
]
DEV_FRACTION = 0.1  # the fine-tuning default the table keeps


def run_table(argv: list) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(PAPER_TABLE), *map(str, argv)], cwd=REPO_ROOT,
        # This checkout's `training`, not the one the virtual environment installed (editable) from another.
        env=subprocess_env(PYTHONPATH=str(REPO_ROOT)), capture_output=True, text=True, timeout=1200,
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
        work=folder / "work" / scifact_slice.name, data_dir=scifact_slice, first=first, second=second,
        first_json=json.loads((folder / "seed-1.json").read_text()), json=json.loads((folder / "table.json").read_text()),
    )


def test_the_table_reports_every_arm_and_column_over_both_seeds(table):
    section = table.json["tables"][table.data_dir.name]
    rows = section["arms"]
    assert [row["key"] for row in rows] == list(ARMS)  # from scratch: no start row
    for row in rows:
        assert list(row["summary"]) == COLUMNS
        assert sorted(row["per_seed"]) == ["1", "2"]
        for column, summary in row["summary"].items():
            if column in PRETRAINING_COLUMNS and row["key"] == "mlm-only":
                assert summary["seeds"] == 0 and summary["mean"] is None  # no decoder, nothing to measure
                continue
            assert summary["seeds"] == 2, (row["key"], column)
            assert isinstance(summary["mean"], float) and isinstance(summary["std"], float)
            if column.endswith("seconds"):
                assert summary["mean"] > 0
            elif column not in PRETRAINING_COLUMNS:
                assert 0 <= summary["mean"] <= 1
    table_lines = section["markdown"].split("\n\n")[1].splitlines()
    markdown_rows = table_lines[2:]
    assert len(markdown_rows) == len(ARMS)
    assert markdown_rows[0].split(" | ")[1] == "n/a"
    assert all(" ± " in row for row in markdown_rows)
    assert table.json["markdown"] in table.second.stdout


def queries_each_fine_tuning_trained_on(work: Path, rows, seed: int, k: str) -> list[set]:
    return [
        {query_id for query_id, _, _ in round_examples(work / row / f"seed-{seed}" / f"{kind}-k{k}", 1)}
        for row in rows for kind in KINDS
    ]


def test_each_few_shot_fine_tuning_trains_every_arm_on_the_same_k_queries_drawn_with_the_seed(table):
    drawn = {}
    for seed in (1, 2):
        per_arm = queries_each_fine_tuning_trained_on(table.work, ARMS, seed, "8")
        assert all(queries == per_arm[0] for queries in per_arm), seed
        assert len(per_arm[0]) == 8, seed
        drawn[seed] = per_arm[0]
    assert drawn[1] != drawn[2]


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
    name = table.data_dir.name
    for first_row, row in zip(table.first_json["tables"][name]["arms"], table.json["tables"][name]["arms"]):
        assert row["per_seed"]["1"] == first_row["per_seed"]["1"]


def test_a_work_folder_holding_a_table_of_other_settings_is_refused(table):
    results_before = (table.work / "results.json").read_text()

    refused = run_table(["--data_dir", table.data_dir, "--budget", "cpu-hour", "--work_dir", table.work.parent])

    assert refused.returncode == 2
    assert f"--work_dir: {table.work} holds" in refused.stderr and "budget" in refused.stderr
    assert (table.work / "results.json").read_text() == results_before


def test_rows_runs_only_the_rows_named_and_refuses_one_the_table_does_not_have(table, tmp_path):
    argv = ["--data_dir", table.data_dir, "--budget", "smoke", "--work_dir", table.work.parent, "--few_shot", *FEW_SHOT,
            "--seeds", "1", "2"]

    chosen = run_table([*argv, "--rows", "decoder-3-span-2", "--output_json", tmp_path / "seed-row.json"])
    no_start = run_table([*argv, "--rows", "start", "mlm-only"])

    assert chosen.returncode == 0, chosen.stderr[-3000:]
    rows = json.loads((tmp_path / "seed-row.json").read_text())["tables"][table.data_dir.name]["arms"]
    assert [row["key"] for row in rows] == ["decoder-3-span-2"]
    assert "[decoder-3-span-2/seed-2/pretraining] done earlier" in chosen.stdout and "running" not in chosen.stdout
    assert "mlm-only" not in chosen.stdout
    assert no_start.returncode == 2  # from scratch there is no start row
    assert "--rows start: not a row of this table" in no_start.stderr and "decoder-3-span-full" in no_start.stderr


WARM_EVALUATIONS = ("dense zero-shot", "dense k=all", "sparse zero-shot", "sparse k=all")


@pytest.fixture(scope="module")
def warm_table(shared_data_dir, splade_tiny_dir, tmp_path_factory):
    """The smoke table continuing splade-tiny on a 10 + 12-query SciFact slice, seed 1, zero-shot and few-shot on all
    training queries; then the same command again, as after an interruption."""
    folder = tmp_path_factory.mktemp("warm-table")
    data_dir = cut_scifact(shared_data_dir / "scifact", folder / "scifact", {"test": 10, "train": 12}, other_documents=10)
    argv = [
        "--data_dir", data_dir, "--from", splade_tiny_dir, "--budget", "smoke", "--work_dir", folder / "work",
        "--seeds", "1", "--few_shot", "all", "--output_json", folder / "table.json",
    ]
    first = run_table(argv)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    rerun = run_table(argv)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-3000:]
    section = json.loads((folder / "table.json").read_text())["tables"]["scifact"]
    return SimpleNamespace(
        work=folder / "work" / "scifact", data_dir=data_dir, start=splade_tiny_dir, first=first, rerun=rerun,
        section=section, rows={row["key"]: row for row in section["arms"]},
    )


def test_a_warm_table_has_the_start_row_and_dense_and_sparse_rows_for_every_arm(warm_table):
    assert list(warm_table.rows) == ["start", *ARMS]
    for key, row in warm_table.rows.items():
        steps = row["per_seed"]["1"]
        assert list(steps) == ([] if key == "start" else ["pretraining"]) + list(WARM_EVALUATIONS)
        for evaluation in WARM_EVALUATIONS:
            assert 0 < steps[evaluation]["ndcg@10"] <= 1 and 0 < steps[evaluation]["recall@100"] <= 1, (key, evaluation)
    # splade-tiny is a trained SPLADE: as a sparse model it ranks this slice far better than its untrained [CLS].
    start = warm_table.rows["start"]["per_seed"]["1"]
    assert start["sparse zero-shot"]["ndcg@10"] > start["dense zero-shot"]["ndcg@10"] + 0.2
    assert "start: the checkpoint as it is" in warm_table.section["markdown"]


def test_few_shot_on_all_queries_fine_tunes_every_row_on_every_training_query(warm_table):
    training_queries = training_set_from_beir(str(warm_table.data_dir), DEV_FRACTION, None, 1).queries
    per_row = queries_each_fine_tuning_trained_on(warm_table.work, warm_table.rows, 1, "all")
    assert all(queries == set(training_queries) for queries in per_row)


def test_each_decoder_arm_reports_its_cls_information_curve_and_plot(warm_table):
    for key, (layers, _) in ARMS.items():
        pretraining = warm_table.rows[key]["per_seed"]["1"]["pretraining"]
        assert Path(pretraining["plot"]) == warm_table.work / key / "seed-1" / "pretrained" / "loss_curves.png"
        assert Path(pretraining["plot"]).is_file()
        if layers is None:
            assert pretraining["cls_information_curve"] is None
            continue
        history = json.loads((Path(pretraining["plot"]).parent / "trainer_state.json").read_text())["log_history"]
        logged = {entry["step"]: entry["eval_cls_information"] for entry in history if "eval_cls_information" in entry}
        assert len(logged) == 2  # the smoke budget's 2 evaluations over 4 steps
        first, last = logged[min(logged)], logged[max(logged)]
        assert pretraining["cls_information_curve"] == [first, last, last]  # first, middle (of 2: the second), last
        assert pretraining["cls_information"] == last


def test_few_shot_columns_are_the_fine_tuning_outputs_figures(warm_table):
    """Each few-shot column is the evaluation of its fine-tuning run's output folder: the best round on dev, or the
    start itself where no round beat it there (on this slice, two steps of fine-tuning do not; the card says so)."""
    collection = load_collection(str(warm_table.data_dir), "test")

    def dense_metrics(folder: Path) -> dict:
        model = load_sentence_transformer(str(folder), pooling="cls", max_seq_length=64)
        return evaluate_retriever(DenseRetriever(model, name=folder.name), collection, metrics=("ndcg@10", "recall@100")).metrics

    for key, row in warm_table.rows.items():
        output = warm_table.work / key / "seed-1" / "dense-kall"
        card = (output / "README.md").read_text()
        assert ("The final model is the starting checkpoint" in card) != ("The final model is round" in card), key
        steps = row["per_seed"]["1"]
        assert steps["dense k=all"]["ndcg@10"] == pytest.approx(dense_metrics(output)["ndcg@10"], abs=1e-9), key


def test_a_warm_table_rerun_runs_nothing_again(warm_table):
    assert "running ..." not in warm_table.rerun.stdout
    for key in ("start", *ARMS):
        for evaluation in ("dense k=all", "sparse k=all"):
            assert f"[{key}/seed-1/{evaluation}] done earlier" in warm_table.rerun.stdout
    # The starting checkpoint's zero-shot evaluations do not depend on the seed: once for the table.
    assert "[start/sparse zero-shot] done earlier" in warm_table.rerun.stdout


def test_a_warm_work_folder_refuses_other_settings_and_the_warm_budget_refuses_scratch(warm_table, scifact_slice):
    results_before = (warm_table.work / "results.json").read_text()

    other_budget = run_table([
        "--data_dir", warm_table.data_dir, "--from", warm_table.start, "--budget", "cpu-warm",
        "--work_dir", warm_table.work.parent,
    ])
    from_scratch = run_table(["--data_dir", scifact_slice, "--budget", "cpu-warm", "--work_dir", warm_table.work.parent])

    assert other_budget.returncode == 2 and f"{warm_table.work} holds a table made with other settings" in other_budget.stderr
    assert (warm_table.work / "results.json").read_text() == results_before
    assert from_scratch.returncode == 2 and "--from scratch: this budget continues a trained encoder" in from_scratch.stderr


def test_a_claim_holds_only_beyond_two_standard_deviations_of_its_per_seed_differences():
    from benchmarks.ablation_report import verdict

    assert verdict([0.05, 0.06]) == "holds beyond 2 sd"  # mean 0.055, sd 0.007
    assert verdict([0.05, 0.02]) == "within 2 sd: not shown"  # mean 0.035, sd 0.021: above 1 sd, not 2
    assert verdict([-0.05, -0.06]) == "reversed beyond 2 sd"
    assert verdict([0.05]).startswith("one seed")


def test_the_macro_average_is_the_mean_over_collections_seed_by_seed():
    from benchmarks.ablation_report import macro_average

    def results(ndcg: float, curve: list[float]) -> dict:
        return {"decoder-3-span-2": {1: {
            "pretraining": {"cls_information_curve": curve, "plot": "loss_curves.png"},
            "dense zero-shot": {"ndcg@10": ndcg},
        }}}

    macro = macro_average([results(0.2, [0.0, 0.1, 0.2]), results(0.4, [0.2, 0.3, 0.6])])

    steps = macro["decoder-3-span-2"][1]
    assert steps["dense zero-shot"]["ndcg@10"] == pytest.approx(0.3)
    assert steps["pretraining"]["cls_information_curve"] == pytest.approx([0.1, 0.2, 0.4])
    assert "plot" not in steps["pretraining"]  # each collection's own PNG: no average
