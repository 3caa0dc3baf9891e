"""Pseudo-label distillation, GPL's recipe without a query generator: a corpus alone, pseudo-queries made from it,
and the margins of BM25 and the start itself (frozen) as targets, on the student's own scale.

A real run from all-MiniLM-L6-v2 (its dropout off, so a training step computes what encoding does) on a SciFact
slice's abstracts, with sentence pseudo-queries; its targets are worked out here independently: bm25s' BM25 and the
start's cosines (sentence-transformers' encode), each standardised, averaged, then multiplied by the spread of the
student's own cosines of the same pairs (the student is the start in round 1), as the label-free recipe names, never
by the fixed 1 / similarity_scale a dense student gets by default, whatever its data. The run trains one step on all its pseudo-queries in
one batch, so its logged loss is what the student was taught: the mean squared gap between its margins and those
targets' margins, not a loss against the source passage as a one-hot label.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from evaluation_helpers import cut_scifact
from finetune_helpers import (
    TINY_FINETUNE, assert_drawn_from_ranks, bm25_scores, finetune, round_dir, round_examples, serve_at, standardised,
    with_dev_split,
)
from training.data.corpus import load_raw_corpus
from training.data.collection import load_collection
from training.finetuning.data import training_set_from_passages
from training.finetuning.teachers import with_start_teacher


PSEUDO_QUERIES = 48
# The start is all-MiniLM-L6-v2 served at 128 tokens, not its 256: every dev evaluation encodes the slice's 220
# abstracts at the start's length, and at 128 this file's three runs took 106 s against 153 s. Still twice the training
# length (TINY_FINETUNE's 64), so a run that publishes what it trained at is told apart from one that keeps the start's.
START_LENGTH = 128
LABEL_FREE_RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "finetune_label_free.yaml"


@pytest.fixture(scope="module")
def start_dir(minilm_dir, tmp_path_factory):
    """all-MiniLM-L6-v2 with its dropout off (the same encodings, and a training step that computes them too), served
    at START_LENGTH tokens."""
    folder = tmp_path_factory.mktemp("minilm-no-dropout") / "minilm"
    shutil.copytree(minilm_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (folder / "config.json").write_text(json.dumps(config))
    serve_at(folder, START_LENGTH)
    return folder


def pseudo_label_distillation(start_dir, scifact_slice, out, negatives: str, *flags, recipe: Path | None = LABEL_FREE_RECIPE):
    """The label-free recipe (or, with `recipe=None`, no recipe) with a tiny run's flags over it."""
    assert finetune([
        *(["--config", recipe] if recipe else []), "--model_name_or_path", start_dir, "--corpus_file", scifact_slice / "corpus.jsonl", "--output_dir", out,
        *TINY_FINETUNE, "--learning_rate", "3e-5", "--pseudo_queries", "sentences", "--negatives", negatives,
        "--teacher", "bm25", "start", "--max_train_queries", PSEUDO_QUERIES, "--max_steps", "1",
        "--per_device_train_batch_size", PSEUDO_QUERIES, "--batch_sampler", "batch_sampler", *flags,
    ]) == 0
    return out


@pytest.fixture(scope="module")
def pseudo_label_run(start_dir, scifact_slice, tmp_path_factory):
    return pseudo_label_distillation(start_dir, scifact_slice, tmp_path_factory.mktemp("pseudo-labels") / "st", "bm25")


@pytest.fixture(scope="module")
def own_negatives_run(start_dir, scifact_slice, tmp_path_factory):
    """The same run with its negatives mined from the start's own index (GPL's dense mining), written as flags
    without the label-free recipe."""
    out = tmp_path_factory.mktemp("own-negatives") / "st"
    return pseudo_label_distillation(start_dir, scifact_slice, out, "model", "--mining_rounds", "1", recipe=None)


@pytest.fixture(scope="module")
def judged_dev_run(start_dir, scifact_slice, shared_data_dir, tmp_path_factory):
    """The same run judged on 10 real SciFact queries (a BEIR folder's qrels/dev.tsv, with its own 23-document corpus:
    the start and the round encode it at START_LENGTH tokens) instead of held-out pseudo-queries."""
    folder = tmp_path_factory.mktemp("judged")
    judged = cut_scifact(shared_data_dir / "scifact", folder / "cut", {"train": 10}, other_documents=10)
    collection = with_dev_split(judged, folder / "scifact-dev", dev_queries=10)
    out = tmp_path_factory.mktemp("judged-dev") / "st"
    return pseudo_label_distillation(start_dir, scifact_slice, out, "bm25", "--dev_data_dir", collection), collection


def start_cosines(start_dir, training_set, examples, max_seq_length: int) -> np.ndarray:
    start = SentenceTransformer(str(start_dir))
    start.max_seq_length = max_seq_length
    queries = start.encode([training_set.queries[query_id] for query_id, _, _ in examples], normalize_embeddings=True)
    columns = []
    for column in range(1 + len(examples[0][2])):
        ids = [positive if column == 0 else negatives[column - 1] for _, positive, negatives in examples]
        documents = start.encode([training_set.corpus[doc_id] for doc_id in ids], normalize_embeddings=True)
        columns.append((queries * documents).sum(axis=1))
    return np.stack(columns, axis=1)


def the_runs_training_set(scifact_slice):
    passages = load_raw_corpus([str(scifact_slice / "corpus.jsonl")], None, "text")["text"]  # each title joined to its text
    return training_set_from_passages(passages, 0.1, PSEUDO_QUERIES, 3, "slice", "slice", ("sentences",))  # its draw


def test_the_targets_are_bm25_and_the_frozen_start_on_the_students_own_scale(pseudo_label_run, start_dir, scifact_slice):
    training_set = the_runs_training_set(scifact_slice)
    examples = round_examples(pseudo_label_run, 1)
    stored = np.asarray(json.loads((round_dir(pseudo_label_run, 1) / "examples.json").read_text())["scores"])
    teacher = start_cosines(start_dir, training_set, examples, START_LENGTH)  # the start as it is served
    student = start_cosines(start_dir, training_set, examples, 64)  # the student, at the run's --max_seq_length
    ensemble = (standardised(bm25_scores(training_set, examples)) + standardised(teacher)) / 2

    assert {query_id for query_id, _, _ in examples} == set(training_set.queries)
    np.testing.assert_allclose(stored, ensemble * student.std(), atol=2e-4)
    assert student.std() > 2 / 20  # the fixed dense scale (1 / similarity_scale) would be more than 2x too narrow


def test_the_student_is_taught_the_teachers_margins_not_the_source_passage(pseudo_label_run, start_dir, scifact_slice):
    training_set = the_runs_training_set(scifact_slice)
    examples = round_examples(pseudo_label_run, 1)
    targets = np.asarray(json.loads((round_dir(pseudo_label_run, 1) / "examples.json").read_text())["scores"])
    student = start_cosines(start_dir, training_set, examples, 64)  # before its first step, the student is the start
    history = json.loads((round_dir(pseudo_label_run, 1) / "trainer_state.json").read_text())["log_history"]
    first_loss = next(entry["loss"] for entry in history if entry.get("step") == 1 and "loss" in entry)

    margin_gap = (student[:, 0] - student[:, 1]) - (targets[:, 0] - targets[:, 1])
    assert len(examples) == PSEUDO_QUERIES  # one step, one batch: every pseudo-query
    assert first_loss == pytest.approx(float(np.mean(margin_gap**2)), rel=0.02, abs=2e-4)


def test_with_negatives_model_round_one_mines_the_starts_own_index_not_bm25(
    own_negatives_run, pseudo_label_run, start_dir, scifact_slice
):
    examples = round_examples(own_negatives_run, 1)
    bm25_mined = round_examples(pseudo_label_run, 1)
    start = SentenceTransformer(str(start_dir))
    start.max_seq_length = 64  # the run's, as it encodes for mining

    assert [example[:2] for example in examples] == [example[:2] for example in bm25_mined]
    assert [negatives for *_, negatives in examples] != [negatives for *_, negatives in bm25_mined]
    assert_drawn_from_ranks(start, the_runs_training_set(scifact_slice), examples, low=10, high=50)
    assert "drawn from ranks 11-50 of the model's own index, re-mined before every round" in (
        (own_negatives_run / "README.md").read_text()
    )


def test_the_card_names_both_teachers_and_the_scale(pseudo_label_run, start_dir):
    card = (pseudo_label_run / "README.md").read_text()

    assert f"bm25 + {start_dir} (margin_mse, scores standardised, averaged, times the student's own spread)" in card


def test_without_the_recipe_a_dense_students_scale_is_one_cosine_unit_whatever_its_data(own_negatives_run, start_dir):
    """No default changes silently with the data source: a corpus alone, as real queries, gets the dense default."""
    card = (own_negatives_run / "README.md").read_text()
    targets = np.asarray(json.loads((round_dir(own_negatives_run, 1) / "examples.json").read_text())["scores"])

    assert f"bm25 + {start_dir} (margin_mse, scores standardised, averaged, times 1 / similarity_scale)" in card
    assert targets.std() <= 1 / 20 + 1e-6  # the mean of two standardised scores spreads at most 1, times 1 / 20


def test_start_as_a_teacher_scores_as_the_student_does(minilm_dir, tiny_seed_dir):
    assert with_start_teacher(["bm25", "start"], str(minilm_dir), sparse=False) == ["bm25", str(minilm_dir)]
    assert with_start_teacher(["start"], str(tiny_seed_dir), sparse=False) == [f"dense:{tiny_seed_dir}"]
    assert with_start_teacher(["start"], str(tiny_seed_dir), sparse=True) == [f"sparse:{tiny_seed_dir}"]


def test_the_label_free_run_publishes_at_the_starts_own_length_not_the_training_length(pseudo_label_run, start_dir):
    """Trained at 64 tokens (TINY_FINETUNE), the run publishes the start's own START_LENGTH, and judged its start
    and round at that length: it kept the start, whose vector of a 400-token text the published folder gives exactly."""
    long_text = " ".join(["the protein binds the receptor and blocks its signal"] * 40)
    published, start = SentenceTransformer(str(pseudo_label_run)), SentenceTransformer(str(start_dir))
    sentence_bert_config = json.loads((pseudo_label_run / "sentence_bert_config.json").read_text())

    assert len(start.tokenizer(long_text)["input_ids"]) > START_LENGTH
    assert sentence_bert_config["max_seq_length"] == published.max_seq_length == START_LENGTH
    assert "kept the start" in (pseudo_label_run / "README.md").read_text()  # one step moves nothing beyond noise
    np.testing.assert_array_equal(published.encode([long_text]), start.encode([long_text]))


def test_a_run_given_real_dev_queries_judges_on_them_and_says_so(judged_dev_run, pseudo_label_run):
    out, collection = judged_dev_run
    real_dev = load_collection(str(collection), "dev")
    judged = json.loads((out / "finetuning" / "start_dev_metrics_per_query.json").read_text())
    pseudo_judged = json.loads((pseudo_label_run / "finetuning" / "start_dev_metrics_per_query.json").read_text())
    round_judged = json.loads((round_dir(out, 1) / "dev_metrics_per_query.json").read_text())

    assert set(judged) == set(round_judged) == set(real_dev.queries) and len(judged) == 10
    assert not set(judged) & set(pseudo_judged)
    assert round_examples(out, 1) == round_examples(pseudo_label_run, 1)  # training is label-free as before
    assert f"judged on 10 real queries of `{collection.name}` (qrels/dev.tsv)" in (out / "README.md").read_text()
