"""`RetrievalEvaluator`: the command line's numbers, inside the sentence-transformers trainers.

It gives the figures of a brute-force search computed here, and a real SentenceTransformerTrainer and
SparseEncoderTrainer call it during training, log its metrics as eval_dev_* and can select checkpoints by it.
The models are the tiny SEED folder (dense [CLS] pooling; SPLADE over its MLM head), trained for two steps, and
splade-tiny's [CLS] vectors where dense figures are compared with brute force.
"""

import pytest
from datasets import Dataset
from sentence_transformers import (
    SentenceTransformerTrainer,
    SentenceTransformerTrainingArguments,
    SparseEncoderTrainer,
    SparseEncoderTrainingArguments,
)
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from sentence_transformers.sparse_encoder.losses import SparseMultipleNegativesRankingLoss, SpladeLoss

from evaluation_helpers import brute_force_ndcg_at_10
from training.common.models import load_sentence_transformer, load_sparse_encoder
from training.data.collection import load_collection
from training.evaluation.evaluate import evaluate_retriever
from training.evaluation.evaluator import RetrievalEvaluator
from training.evaluation.retrievers import DenseRetriever, SparseRetriever

TRAINING = dict(
    max_steps=2, per_device_train_batch_size=8, eval_strategy="steps", eval_steps=1, logging_steps=1,
    save_strategy="no", report_to="none", dataloader_pin_memory=False, use_cpu=True,
)


@pytest.fixture(scope="module")
def dev(scifact_slice):
    return load_collection(str(scifact_slice), "test")


@pytest.fixture(scope="module")
def train_pairs(scifact_slice):
    """(query, positive abstract) pairs of the slice's train split."""
    train = load_collection(str(scifact_slice), "train")
    pairs = [
        (train.queries[query_id], train.corpus[document_id])
        for query_id, judged in train.qrels.items() for document_id, grade in judged.items() if grade > 0
    ]
    return Dataset.from_dict({"query": [q for q, _ in pairs], "document": [d for _, d in pairs]})


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_evaluator_gives_the_brute_force_figures(kind, tiny_seed_dir, splade_tiny_dir, dev):
    # Dense: splade-tiny's [CLS] vectors, whose cosines spread (the tiny SEED folder's lie within 1e-5 of each other).
    if kind == "dense":
        model = load_sentence_transformer(str(splade_tiny_dir), pooling="cls", max_seq_length=64)
    else:
        model = load_sparse_encoder(str(tiny_seed_dir))
    evaluator = RetrievalEvaluator(dev, name="dev")

    metrics = evaluator(model)

    assert metrics["dev_ndcg@10"] == pytest.approx(brute_force_ndcg_at_10(model, dev), abs=1e-9)
    assert evaluator.primary_metric == "dev_ndcg@10" and evaluator.greater_is_better
    assert ("dev_flops" in metrics) == (kind == "sparse")


def eval_logs(trainer) -> list[dict]:
    return [entry for entry in trainer.state.log_history if "eval_dev_ndcg@10" in entry]


def test_sentence_transformer_trainer_logs_the_evaluator_every_eval_step(tiny_seed_dir, dev, train_pairs, tmp_path):
    model = load_sentence_transformer(str(tiny_seed_dir))
    evaluator = RetrievalEvaluator(dev, name="dev")
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path), metric_for_best_model="eval_dev_ndcg@10", **TRAINING
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=train_pairs, loss=MultipleNegativesRankingLoss(model), evaluator=evaluator
    )

    trainer.train()

    logged = eval_logs(trainer)
    assert [entry["step"] for entry in logged] == [1, 2]
    after_training = evaluate_retriever(DenseRetriever(model, "tiny", show_progress_bar=False), dev).metrics
    assert logged[-1]["eval_dev_ndcg@10"] == pytest.approx(after_training["ndcg@10"])
    assert trainer.state.best_metric == max(entry["eval_dev_ndcg@10"] for entry in logged)


def test_sparse_encoder_trainer_logs_metrics_and_sparsity(tiny_seed_dir, dev, train_pairs, tmp_path):
    model = load_sparse_encoder(str(tiny_seed_dir))
    loss = SpladeLoss(model, SparseMultipleNegativesRankingLoss(model), document_regularizer_weight=3e-3, query_regularizer_weight=5e-3)
    args = SparseEncoderTrainingArguments(output_dir=str(tmp_path), **TRAINING)
    trainer = SparseEncoderTrainer(
        model=model, args=args, train_dataset=train_pairs, loss=loss, evaluator=RetrievalEvaluator(dev, name="dev")
    )

    trainer.train()

    logged = eval_logs(trainer)
    assert [entry["step"] for entry in logged] == [1, 2]
    after_training = evaluate_retriever(SparseRetriever(model, "tiny", show_progress_bar=False), dev)
    assert logged[-1]["eval_dev_ndcg@10"] == pytest.approx(after_training.metrics["ndcg@10"])
    assert logged[-1]["eval_dev_query_active_dims"] == pytest.approx(after_training.stats["query_active_dims"])
