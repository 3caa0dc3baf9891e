"""`training/evaluate.py` on a slice of SciFact: sparse, dense and hybrid retrievers in one call, one table, a JSON
report and TREC run files that read back (ranx parses them) to the same numbers."""

import dataclasses
import json
import re

import pytest
from ranx import Qrels, Run, evaluate as ranx_evaluate, fuse

from evaluation_helpers import brute_force_ndcg_at_10, evaluate
from training.common.models import load_sentence_transformer, load_sparse_encoder
from training.evaluation.arguments import EvaluationArguments
from training.data.collection import load_collection
from training.evaluation.evaluate import evaluate_retriever
from training.evaluation.metrics import compute_metrics
from training.evaluation.retrievers import BM25Retriever, DenseRetriever


@pytest.fixture(scope="module")
def evaluation(scifact_slice, tiny_seed_dir, tmp_path_factory):
    """One call: SPLADE over the SEED folder's MLM head, the folder as a dense [CLS] model, and bm25 + SPLADE fused."""
    out = tmp_path_factory.mktemp("evaluation")
    specs = [f"sparse:{tiny_seed_dir}", str(tiny_seed_dir), f"hybrid:bm25+sparse:{tiny_seed_dir}"]
    status = evaluate([
        *specs, "--data_dir", scifact_slice, "--output_json", out / "results.json", "--save_runs", out / "runs",
        "--cache_dir", out / "cache",
    ])
    assert status == 0
    return specs, json.loads((out / "results.json").read_text()), out / "runs"


def test_every_retriever_is_a_result_in_the_order_given(evaluation, scifact_slice):
    specs, report, _ = evaluation

    assert [result["retriever"] for result in report["results"]] == specs
    assert report["collection"] == {"name": f"{scifact_slice.name}/test", "queries": 30, "documents": len(
        load_collection(str(scifact_slice), "test").corpus
    )}


def test_sparse_result_is_the_brute_force_figure_and_reports_sparsity(evaluation, scifact_slice, tiny_seed_dir):
    _, report, _ = evaluation
    sparse = report["results"][0]
    collection = load_collection(str(scifact_slice), "test")
    model = load_sparse_encoder(str(tiny_seed_dir))

    assert sparse["metrics"]["ndcg@10"] == pytest.approx(brute_force_ndcg_at_10(model, collection), abs=1e-9)
    documents = model.encode_document(list(collection.corpus.values()), convert_to_sparse_tensor=False).numpy() > 0
    queries = model.encode_query(list(collection.queries.values()), convert_to_sparse_tensor=False).numpy() > 0
    assert sparse["stats"]["document_active_dims"] == pytest.approx(documents.sum(axis=1).mean())
    assert sparse["stats"]["query_active_dims"] == pytest.approx(queries.sum(axis=1).mean())
    assert sparse["stats"]["flops"] == pytest.approx((queries.astype(float) @ documents.T.astype(float)).mean())
    assert "flops" not in report["results"][1]["stats"]


def test_trec_run_files_read_back_to_the_reported_metrics(evaluation, scifact_slice):
    _, report, runs = evaluation
    judgments = load_collection(str(scifact_slice), "test").qrels
    files = sorted(runs.glob("*.trec"))

    assert [file.name.split("-", 1)[0] for file in files] == ["1", "2", "3"]
    for file, result in zip(files, report["results"]):
        run = Run.from_file(str(file), kind="trec").to_dict()
        assert compute_metrics(judgments, run, list(result["metrics"])) == pytest.approx(result["metrics"]), file.name


def test_hybrid_is_reciprocal_rank_fusion_of_its_members_runs(evaluation, scifact_slice):
    _, report, runs = evaluation
    collection = load_collection(str(scifact_slice), "test")
    bm25_run = Run.from_dict(evaluate_retriever(BM25Retriever(show_progress_bar=False), collection).run)
    sparse_run = Run.from_file(str(next(runs.glob("1-*.trec"))), kind="trec")
    hybrid = report["results"][2]

    fused = fuse([bm25_run, sparse_run], norm=None, method="rrf", params={"k": 60})

    assert hybrid["settings"] == {"fusion": "rrf", "params": {"k": 60}}
    assert compute_metrics(collection.qrels, fused.to_dict()) == pytest.approx(hybrid["metrics"])


def test_fusion_weights_tuned_on_another_split_are_the_best_there_and_used(scifact_slice, tiny_seed_dir, tmp_path):
    status = evaluate([
        "bm25", tiny_seed_dir, f"hybrid:bm25+{tiny_seed_dir}", "--data_dir", scifact_slice, "--fusion", "score_sum",
        "--fusion_tune_split", "train", "--output_json", tmp_path / "results.json", "--save_runs", tmp_path / "runs",
        "--cache_dir", tmp_path / "cache",
    ])

    assert status == 0
    hybrid = json.loads((tmp_path / "results.json").read_text())["results"][2]
    assert hybrid["settings"]["tuned_on"] == "train" and hybrid["settings"]["tuned_for"] == "ndcg@10"
    weights = hybrid["settings"]["params"]["weights"]
    # Best on train among ranx's grid of weights (steps of 0.1 summing to 1), by the members' train runs.
    train = load_collection(str(scifact_slice), "train")
    members = [BM25Retriever(show_progress_bar=False), DenseRetriever(load_sentence_transformer(str(tiny_seed_dir)), "d")]
    train_runs = [Run.from_dict(evaluate_retriever(member, train).run) for member in members]

    def train_ndcg(pair) -> float:  # as ranx.optimize_fusion scores each candidate
        fused = fuse(train_runs, norm="min-max", method="wsum", params={"weights": pair})
        return ranx_evaluate(Qrels.from_dict(train.qrels), fused, "ndcg@10")

    assert train_ndcg(weights) == pytest.approx(max(train_ndcg([w / 10, 1 - w / 10]) for w in range(11)))
    # ... and those weights are what the test split was evaluated with.
    member_runs = [Run.from_file(str(next((tmp_path / "runs").glob(f"{n}-*.trec"))), kind="trec") for n in (1, 2)]
    fused = fuse(member_runs, norm="min-max", method="wsum", params={"weights": weights})
    judgments = load_collection(str(scifact_slice), "test").qrels
    assert compute_metrics(judgments, fused.to_dict()) == pytest.approx(hybrid["metrics"])


def help_entries(help_text: str) -> dict[str, str]:
    """argparse's --help as {first flag or metavar: its description}, wrapped lines joined."""
    entries, current = {}, None
    for line in help_text.splitlines():
        if re.match(r"^  \S", line):
            invocation, _, description = line.strip().partition("  ")
            current = invocation.split(",")[0].split()[0]
            entries[current] = description.strip()
        elif current is not None and line.startswith("   "):
            entries[current] += " " + line.strip()
        else:
            current = None
    return entries


def test_help_documents_every_flag_with_its_own_text(capsys):
    with pytest.raises(SystemExit) as exit_info:
        evaluate(["--help"])

    assert exit_info.value.code == 0
    entries = help_entries(capsys.readouterr().out)
    for field in dataclasses.fields(EvaluationArguments):
        flag = field.metadata.get("metavar") or f"--{field.name}"
        documented = re.sub(r" \(default: [^()]*\)$", "", entries[flag])
        assert len(field.metadata.get("help", "").split()) >= 3, f"{flag} has no help text"
        # Compared without whitespace: argparse wraps the text, breaking lines at hyphens too.
        assert "".join(documented.split()) == "".join(field.metadata["help"].split()), flag
