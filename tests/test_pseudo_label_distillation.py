"""Pseudo-label distillation, GPL's recipe without a query generator: a corpus alone, pseudo-queries made from it,
and the margins of BM25 and the start itself (frozen) as targets, on the student's own scale.

A real run from all-MiniLM-L6-v2 on a SciFact slice's abstracts, with sentence pseudo-queries; its targets are worked
out here independently: bm25s' BM25 and the start's cosines (sentence-transformers' encode), each standardised,
averaged, then multiplied by the spread of the student's own cosines of the same pairs (the student is the start
in round 1), never by the fixed 1 / similarity_scale a dense student trained on real queries gets.
"""

import json

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from finetune_helpers import TINY_FINETUNE, bm25_scores, finetune, round_dir, round_examples, standardised
from training.common.corpus import load_raw_corpus
from training.finetuning.data import training_set_from_passages
from training.finetuning.teachers import with_start_teacher


@pytest.fixture(scope="module")
def pseudo_label_run(minilm_dir, scifact_slice, tmp_path_factory):
    out = tmp_path_factory.mktemp("pseudo-labels") / "st"
    assert finetune([
        "--model_name_or_path", minilm_dir, "--corpus_file", scifact_slice / "corpus.jsonl", "--output_dir", out,
        *TINY_FINETUNE, "--learning_rate", "3e-5", "--pseudo_queries", "sentences", "--negatives", "bm25",
        "--teacher", "bm25", "start", "--max_train_queries", "48", "--num_train_epochs", "1",
    ]) == 0
    return out


def start_cosines(minilm_dir, training_set, examples, max_seq_length: int) -> np.ndarray:
    start = SentenceTransformer(str(minilm_dir))
    start.max_seq_length = max_seq_length
    queries = start.encode([training_set.queries[query_id] for query_id, _, _ in examples], normalize_embeddings=True)
    columns = []
    for column in range(1 + len(examples[0][2])):
        ids = [positive if column == 0 else negatives[column - 1] for _, positive, negatives in examples]
        documents = start.encode([training_set.corpus[doc_id] for doc_id in ids], normalize_embeddings=True)
        columns.append((queries * documents).sum(axis=1))
    return np.stack(columns, axis=1)


def test_the_targets_are_bm25_and_the_frozen_start_on_the_students_own_scale(pseudo_label_run, minilm_dir, scifact_slice):
    passages = load_raw_corpus([str(scifact_slice / "corpus.jsonl")], None, "text")["text"]  # each title joined to its text
    training_set = training_set_from_passages(passages, 0.1, 48, 3, "slice", "slice", ("sentences",))  # the run's draw
    examples = round_examples(pseudo_label_run, 1)
    stored = np.asarray(json.loads((round_dir(pseudo_label_run, 1) / "examples.json").read_text())["scores"])
    teacher = start_cosines(minilm_dir, training_set, examples, 256)  # the start as it ships
    student = start_cosines(minilm_dir, training_set, examples, 64)  # the student, at the run's --max_seq_length
    ensemble = (standardised(bm25_scores(training_set, examples)) + standardised(teacher)) / 2

    assert {query_id for query_id, _, _ in examples} == set(training_set.queries)
    np.testing.assert_allclose(stored, ensemble * student.std(), atol=2e-4)
    assert student.std() > 2 / 20  # the fixed dense scale (1 / similarity_scale) would be more than 2x too narrow


def test_the_card_names_both_teachers_and_the_scale(pseudo_label_run, minilm_dir):
    card = (pseudo_label_run / "README.md").read_text()

    assert f"bm25 + {minilm_dir} (margin_mse, scores standardised, averaged, times the student's own spread)" in card


def test_start_as_a_teacher_scores_as_the_student_does(minilm_dir, tiny_seed_dir):
    assert with_start_teacher(["bm25", "start"], str(minilm_dir), sparse=False) == ["bm25", str(minilm_dir)]
    assert with_start_teacher(["start"], str(tiny_seed_dir), sparse=False) == [f"dense:{tiny_seed_dir}"]
    assert with_start_teacher(["start"], str(tiny_seed_dir), sparse=True) == [f"sparse:{tiny_seed_dir}"]
