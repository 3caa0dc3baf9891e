"""Fine-tuning data: the dev queries that select the final model are never training queries, and the trainer's
dataset holds each example's own texts.

Without a dev split, every source (a BEIR folder, a pairs file, crops of passages) holds out `--dev_fraction` of
its queries: the rest, and only the rest, are trained on, and a few-shot draw takes from the rest only.
"""

import json

import numpy as np
import pytest

from training.data.collection import Collection, load_collection
from training.data.packed_corpus import PackedCorpus
from training.finetuning.data import TrainingSet, training_set_from_beir, training_set_from_passages, training_set_from_pairs
from training.finetuning.examples import examples_dataset
from training.finetuning.negatives import draw_negatives

DEV_FRACTION = 0.3


def assert_held_out(training_set, queries_with_positives: set[str], max_train_queries: int | None = None) -> None:
    """The dev queries are `DEV_FRACTION` of the queries with positives, and none of them is a training query."""
    held_out = round(len(queries_with_positives) * DEV_FRACTION)
    dev, train = set(training_set.dev.queries), set(training_set.queries)

    assert len(dev) == held_out
    assert dev <= queries_with_positives and train <= queries_with_positives
    assert not dev & train
    assert not dev & {query_id for query_id, _ in training_set.pairs()}
    if max_train_queries is None:
        assert train | dev == queries_with_positives
    else:
        assert len(train) == max_train_queries


def test_beir_folder_without_a_dev_split_holds_dev_queries_out_of_training(scifact_slice):
    judged = set(load_collection(str(scifact_slice), "train").queries)

    assert_held_out(training_set_from_beir(str(scifact_slice), DEV_FRACTION, None, seed=3), judged)
    assert_held_out(training_set_from_beir(str(scifact_slice), DEV_FRACTION, 8, seed=3), judged, max_train_queries=8)


def test_pairs_file_holds_dev_queries_out_of_training(tmp_path):
    path = tmp_path / "pairs.jsonl"
    records = [{"query": f"question {i}", "positive": f"answer {i}", "negatives": [f"wrong {i}"]} for i in range(20)]
    path.write_text("".join(json.dumps(record) + "\n" for record in records))

    training_set = training_set_from_pairs(str(path), DEV_FRACTION, None, seed=3)

    assert_held_out(training_set, set(training_set.queries) | set(training_set.dev.queries))
    assert {*training_set.queries.values(), *training_set.dev.queries.values()} == {record["query"] for record in records}
    assert set(training_set.given_negatives) == set(training_set.queries)


@pytest.mark.parametrize("seed", [3, 4])
def test_crops_hold_dev_passages_out_of_training(scifact_slice, seed):
    passages = [json.loads(line)["text"] for line in (scifact_slice / "corpus.jsonl").read_text().splitlines()][:40]

    training_set = training_set_from_passages(passages, DEV_FRACTION, None, seed, "slice", "slice abstracts")
    few_shot = training_set_from_passages(passages, DEV_FRACTION, 8, seed, "slice", "slice abstracts")

    assert len(training_set.queries) + len(training_set.dev.queries) == 40
    every_query = set(training_set.queries) | set(training_set.dev.queries)
    assert_held_out(training_set, every_query)
    assert_held_out(few_shot, every_query, max_train_queries=8)
    assert set(few_shot.passages) == set(few_shot.queries)


def test_training_dataset_columns_hold_each_examples_own_texts_and_teacher_scores(scifact_slice):
    training_set = training_set_from_beir(str(scifact_slice), DEV_FRACTION, None, seed=3)
    pairs = training_set.pairs()
    documents = sorted(training_set.corpus)
    examples = [(query_id, positive, documents[index : index + 2]) for index, (query_id, positive) in enumerate(pairs)]
    scores = np.arange(len(examples) * 3, dtype=np.float32).reshape(len(examples), 3)

    dataset = examples_dataset(training_set, examples, scores)

    assert dataset.column_names == ["query", "positive", "negative_1", "negative_2", "label"]
    for row, (query_id, positive, negatives), expected_scores in zip(dataset, examples, scores.tolist()):
        assert row["query"] == training_set.queries[query_id]
        assert row["positive"] == training_set.corpus[positive]
        assert [row["negative_1"], row["negative_2"]] == [training_set.corpus[doc_id] for doc_id in negatives]
        assert row["label"] == expected_scores


def test_a_query_short_of_candidates_is_topped_up_with_random_documents_never_its_positives():
    """Every example gets the same number of negatives: a query whose mined candidates run short draws the rest at
    random from the corpus (seeded, so a rerun draws the same), never a judged positive and never twice."""
    corpus = PackedCorpus.from_items((f"d{n}", f"document {n}") for n in range(6))
    queries = {"q1": "one", "q2": "two"}
    qrels = {"q1": {"d0": 1, "d1": 1}, "q2": {"d2": 1, "d5": 0}}  # d5: judged not relevant, a fair negative
    training_set = TrainingSet(queries, corpus, qrels, Collection("dev", corpus, {}, {}), "synthetic", "synthetic")
    candidates = {"q1": ["d2", "d3", "d4"], "q2": ["d4"]}

    draws = [draw_negatives(candidates, training_set, 3, seed=seed) for seed in range(20)]

    for examples in draws:
        assert [(query, positive) for query, positive, _ in examples] == [("q1", "d0"), ("q1", "d1"), ("q2", "d2")]
        assert all(sorted(negatives) == ["d2", "d3", "d4"] for _, _, negatives in examples[:2])  # enough candidates
        topped_up = examples[2][2]
        assert len(set(topped_up)) == 3 and "d4" in topped_up and "d2" not in topped_up
    assert draws[1] == draw_negatives(candidates, training_set, 3, seed=1)
    assert len({tuple(sorted(examples[2][2])) for examples in draws}) > 1  # the seed draws
