"""The training examples of one round, as the `datasets.Dataset` sentence-transformers' trainer reads.

Columns follow the loss's input order: query, positive, then negative_1..negative_n; with a
teacher, a `label` column holds its scores of the positive then each negative (MarginMSE and
KL-divergence both read them in that form).
"""

import numpy as np
from datasets import Dataset

from .training_set import TrainingSet


def scored_pairs(training_set: TrainingSet, examples: list[tuple[str, str, list[str]]]) -> tuple[list[str], list[str]]:
    """The query texts and document ids of every (example, document) pair, each example's positive then negatives."""
    width = 1 + len(examples[0][2])
    queries = [training_set.queries[query_id] for query_id, _, negatives in examples for _ in range(width)]
    document_ids = [doc_id for _, positive, negatives in examples for doc_id in (positive, *negatives)]
    return queries, document_ids


def teacher_scores(teacher, training_set: TrainingSet, examples: list[tuple[str, str, list[str]]]) -> np.ndarray:
    """(examples, 1 + negatives) teacher scores of each example's positive then negatives."""
    queries, document_ids = scored_pairs(training_set, examples)
    # each document's text read once: a document repeats across examples, and each read makes a new string
    texts = {doc_id: training_set.corpus[doc_id] for doc_id in dict.fromkeys(document_ids)}
    documents = [texts[doc_id] for doc_id in document_ids]
    return np.asarray(teacher.score(queries, documents), dtype=np.float32).reshape(len(examples), -1)


def own_index_scores(index, training_set: TrainingSet, examples: list[tuple[str, str, list[str]]]) -> np.ndarray:
    """(examples, 1 + negatives) scores of each example's positive then negatives by the model whose index of the
    training corpus `index` is (a SparseRetriever or DenseRetriever): its documents are not encoded again."""
    return index.pair_scores(*scored_pairs(training_set, examples)).reshape(len(examples), -1)


def examples_dataset(
    training_set: TrainingSet,
    examples: list[tuple[str, str, list[str]]],
    scores: np.ndarray | None = None,
) -> Dataset:
    columns = {
        "query": [training_set.queries[query_id] for query_id, _, _ in examples],
        "positive": [training_set.corpus[positive] for _, positive, _ in examples],
    }
    for index in range(len(examples[0][2])):
        columns[f"negative_{index + 1}"] = [training_set.corpus[negatives[index]] for _, _, negatives in examples]
    if scores is not None:
        columns["label"] = scores.tolist()
    return Dataset.from_dict(columns)
