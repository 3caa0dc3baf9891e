"""Unsupervised crop pairs are drawn afresh every epoch (Contriever's way), so a model cannot learn fixed pairs by
heart: each epoch every training example's query and positive are two new crops of its own passage, the same ones
again for a run resumed in that epoch, while mined negatives and teacher-scored pairs stay as they were."""

import json

import numpy as np
import pytest
from sentence_transformers.base.data_collator import BaseDataCollator
from transformers import TrainerControl, TrainerState, TrainingArguments

from finetune_helpers import TINY_FINETUNE, finetune
from training.finetuning.data import training_set_from_passages
from training.finetuning.pipeline import round_dataset

PASSAGES = 40


@pytest.fixture(scope="module")
def crops(scifact_slice):
    passages = [json.loads(line)["text"] for line in (scifact_slice / "corpus.jsonl").read_text().splitlines()]
    training_set = training_set_from_passages(passages[:PASSAGES], 0.3, None, 3, "slice", "slice abstracts")
    documents = sorted(training_set.corpus)
    examples = [(query_id, positive, [documents[index]]) for index, (query_id, positive) in enumerate(training_set.pairs())]
    return training_set, examples


def rows_in_epoch(dataset, callbacks, epoch: float) -> list[dict]:
    for callback in callbacks:
        callback.on_epoch_begin(TrainingArguments("unused"), TrainerState(epoch=epoch), TrainerControl())
    return [dataset[index] for index in range(len(dataset))]


def is_crop_of(text: str, passage: str) -> bool:
    """A contiguous run of the passage's words."""
    return f" {text} " in f" {' '.join(passage.split())} "


def test_each_epoch_draws_new_crops_of_each_examples_own_passage_and_keeps_its_negatives(crops):
    training_set, examples = crops
    dataset, callbacks = round_dataset(training_set, examples, None, "3/1")

    first, again, second = (rows_in_epoch(dataset, callbacks, epoch) for epoch in (0.0, 0.0, 1.0))
    resumed = rows_in_epoch(dataset, callbacks, 1.5)  # a run resumed half-way through epoch 1

    for epoch_rows in (first, second):
        for row, (query_id, _, negatives) in zip(epoch_rows, examples):
            assert list(row) == ["query", "positive", "negative_1"]  # the loss's input order, nothing else
            passage = training_set.passages[query_id]
            assert is_crop_of(row["query"], passage) and is_crop_of(row["positive"], passage)
            assert row["negative_1"] == training_set.corpus[negatives[0]]
    assert first == again and second == resumed
    changed = [a["query"] != b["query"] and a["positive"] != b["positive"] for a, b in zip(first, second)]
    assert np.mean(changed) > 0.8
    assert np.mean([row["query"] != training_set.queries[query_id] for row, (query_id, _, _) in zip(first, examples)]) > 0.8


def test_teacher_scored_crop_pairs_are_trained_as_the_pairs_the_teacher_scored(crops):
    training_set, examples = crops
    scores = np.ones((len(examples), 2), dtype=np.float32)

    dataset, callbacks = round_dataset(training_set, examples, scores, "3/1")

    assert callbacks == []
    assert dataset["query"] == [training_set.queries[query_id] for query_id, _, _ in examples]
    assert dataset["positive"] == [training_set.corpus[positive] for _, positive, _ in examples]


def test_the_trainer_sees_new_crops_in_its_second_epoch(scifact_slice, tiny_seed_dir, tmp_path):
    """Through the real pipeline and Trainer: the queries the data collator receives in epoch 2 are not epoch 1's."""
    corpus = tmp_path / "passages.jsonl"
    corpus.write_text("".join(line + "\n" for line in (scifact_slice / "corpus.jsonl").read_text().splitlines()[:PASSAGES]))
    batches = []
    collate = BaseDataCollator.__call__

    def spy(collator, features):
        batches.append(sorted(feature["query"] for feature in features))
        return collate(collator, features)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BaseDataCollator, "__call__", spy)
        assert finetune([
            "--model_name_or_path", tiny_seed_dir, "--corpus_file", corpus, "--output_dir", tmp_path / "st",
            *TINY_FINETUNE, "--negatives", "none", "--mining_rounds", "1", "--num_train_epochs", "2",
            "--dataloader_drop_last", "false", "--dev_fraction", "0.3",
        ]) == 0

    steps_per_epoch = len(batches) // 2
    first_epoch = {query for batch in batches[:steps_per_epoch] for query in batch}
    second_epoch = {query for batch in batches[steps_per_epoch:] for query in batch}
    assert len(first_epoch) == len(second_epoch) == PASSAGES - round(PASSAGES * 0.3)
    assert len(first_epoch & second_epoch) < 0.2 * len(first_epoch)


def test_with_mixed_pseudo_queries_only_the_crop_pairs_are_drawn_afresh(scifact_slice):
    passages = [json.loads(line)["text"] for line in (scifact_slice / "corpus.jsonl").read_text().splitlines()]
    training_set = training_set_from_passages(passages[:PASSAGES], 0.3, None, 3, "slice", "slice abstracts", ("crops", "sentences"))
    examples = [(query_id, positive, []) for query_id, positive in training_set.pairs()]
    dataset, callbacks = round_dataset(training_set, examples, None, "3/1")

    first, second = (rows_in_epoch(dataset, callbacks, epoch) for epoch in (0.0, 1.0))
    cropped = [query_id in training_set.passages for query_id, _, _ in examples]

    assert 0 < sum(cropped) < len(examples)
    for crop, row, later, (query_id, positive, _) in zip(cropped, first, second, examples):
        if crop:
            assert is_crop_of(row["query"], training_set.passages[query_id])
        else:  # a sentence and the passage it was cut from, every epoch
            assert row == later == {"query": training_set.queries[query_id], "positive": training_set.corpus[positive]}
    assert np.mean([a["query"] != b["query"] for a, b, crop in zip(first, second, cropped) if crop]) > 0.8
