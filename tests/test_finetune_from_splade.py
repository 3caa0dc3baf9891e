"""`training/finetune.py --sparse` from a trained SPLADE checkpoint (splade-tiny, a bare BertForMaskedLM): the run
trains it as the SPLADE it is (its MLM head max-pooled, saved as sentence-transformers' standard modules), lowers the
ranking loss without losing the sparsity it started with, and its card names where it started."""

import json
import statistics

import pytest
from huggingface_hub import ModelCard
from sentence_transformers import SparseEncoder
from sentence_transformers.sparse_encoder.modules import SpladePooling, Transformer

from finetune_helpers import TINY_FINETUNE, finetune, round_dir


@pytest.fixture(scope="module")
def splade_run(scifact_slice, splade_tiny_dir, tmp_path_factory):
    """Three epochs over the slice's training queries with BM25 negatives, at a learning rate for a trained model."""
    out = tmp_path_factory.mktemp("from-splade") / "splade"
    assert finetune([
        "--model_name_or_path", splade_tiny_dir, "--base_model", "example-org/splade-tiny", "--data_dir", scifact_slice,
        "--output_dir", out, *TINY_FINETUNE,
        "--sparse", "--learning_rate", "1e-4", "--negatives", "bm25", "--num_train_epochs", "3", "--dev_fraction", "0.3",
    ]) == 0
    return out


def test_fine_tuning_splade_lowers_the_loss_and_keeps_its_sparsity(splade_run):
    history = json.loads((round_dir(splade_run, 1) / "trainer_state.json").read_text())["log_history"]
    losses = [(entry["epoch"], entry["base_loss"]) for entry in history if "base_loss" in entry]
    start = json.loads((splade_run / "finetuning" / "start_dev_metrics.json").read_text())
    final = json.loads((round_dir(splade_run, 1) / "dev_metrics.json").read_text())

    first_epoch = statistics.mean(loss for epoch, loss in losses if epoch <= 1)
    last_epoch = statistics.mean(loss for epoch, loss in losses if epoch > 2)
    assert last_epoch < first_epoch
    # splade-tiny starts sparse (a few hundred active dimensions per abstract); training keeps it so.
    assert 0.5 * start["dev_document_active_dims"] <= final["dev_document_active_dims"] <= 2 * start["dev_document_active_dims"]
    assert start["dev_document_active_dims"] < 1000


def test_the_model_keeps_the_checkpoints_splade_form_and_the_card_names_its_start(splade_run, splade_tiny_dir):
    model = SparseEncoder(str(splade_run))
    transformer, pooling = list(model)

    assert isinstance(transformer, Transformer) and transformer.transformer_task == "fill-mask"
    assert isinstance(pooling, SpladePooling) and pooling.pooling_strategy == "max"
    assert pooling.activation_function == "relu"
    assert model.max_seq_length == 64
    card = ModelCard.load(splade_run / "README.md")
    assert card.data.base_model == "example-org/splade-tiny"  # the Hub id given with --base_model; the folder: the text
    assert f"**Starting checkpoint**: `{splade_tiny_dir}`" in card.text
