"""`training/finetune.py --sparse`: a SPLADE SparseEncoder trained on a SEED pretraining folder's MLM head with
FLOPS regularisation and negatives re-mined from its own sparse index."""

import json

import pytest
import torch
from sentence_transformers import SparseEncoder

from finetune_helpers import (
    PROBE_TEXTS,
    TINY_FINETUNE,
    assert_drawn_from_ranks,
    encoded_in_plain_environment,
    finetune,
    judged_positives,
    plain_bert_files,
    round_dir,
    round_examples,
)
from training.common.models import load_sparse_encoder
from training.data.collection import load_collection
from training.evaluation.retrievers import sparse


@pytest.fixture(scope="module")
def sparse_run(scifact_slice, tiny_seed_dir, tmp_path_factory):
    """Two rounds of 3 epochs: BM25 negatives, then negatives mined from the round-1 SPLADE model's index."""
    out = tmp_path_factory.mktemp("sparse") / "splade"
    with pytest.MonkeyPatch.context() as patch:
        # Round 2 mines its 21 queries in 6 blocks of scores.
        patch.setattr(sparse, "SCORE_BLOCK_VALUES", 4 * len(load_collection(str(scifact_slice), "train").corpus))
        assert finetune([
            "--model_name_or_path", tiny_seed_dir, "--data_dir", scifact_slice, "--output_dir", out, *TINY_FINETUNE,
            "--sparse", "--query_regularizer_weight", "0.1", "--document_regularizer_weight", "0.1",
            "--negatives", "self", "--mining_rounds", "2", "--negatives_range_min", "2", "--negatives_range_max", "20",
            "--num_train_epochs", "3", "--dev_fraction", "0.3",
        ]) == 0
    return out


def test_sparse_training_lowers_the_ranking_loss_and_the_flops(sparse_run):
    history = json.loads((round_dir(sparse_run, 1) / "trainer_state.json").read_text())["log_history"]
    ranking_losses = [entry["base_loss"] for entry in history if "base_loss" in entry]
    start = json.loads((sparse_run / "finetuning" / "start_dev_metrics.json").read_text())
    final = json.loads((round_dir(sparse_run, 2) / "dev_metrics.json").read_text())

    assert ranking_losses[-1] < ranking_losses[0]
    # FLOPS: expected multiplications per query-document pair of the dev collection, as the SPLADE papers count them.
    assert final["dev_flops"] < 0.5 * start["dev_flops"]
    assert final["dev_document_active_dims"] < start["dev_document_active_dims"]


def test_self_mined_sparse_negatives_come_from_its_own_index_and_are_never_judged_positives(sparse_run, scifact_slice):
    positives = judged_positives(scifact_slice)
    second = round_examples(sparse_run, 2)
    round_one_model = SparseEncoder(str(round_dir(sparse_run, 1) / "model"))

    assert [negatives for *_, negatives in round_examples(sparse_run, 1)] != [negatives for *_, negatives in second]
    assert_drawn_from_ranks(round_one_model, load_collection(str(scifact_slice), "train"), second, low=2, high=20)
    for query_id, _, negatives in second:
        assert not set(negatives) & positives[query_id], query_id


def test_sparse_model_fine_tuned_from_a_seed_checkpoint_is_published_as_plain_bert_for_masked_lm(sparse_run):
    """text-embeddings-inference serves SPLADE from a bert folder with a fill-mask head."""
    assert plain_bert_files(sparse_run) == {
        "model_type": "bert", "architectures": ["BertForMaskedLM"], "auto_map": False, "code_files": [],
        "tokenizer.json": True, "max_seq_length": 64,
    }


def test_published_sparse_model_encodes_the_same_vectors_where_seed_encoder_is_not_installed(
    sparse_run, plain_python, tmp_path
):
    elsewhere = encoded_in_plain_environment(plain_python, "SparseEncoder", sparse_run, tmp_path)
    here = load_sparse_encoder(str(sparse_run)).encode(PROBE_TEXTS, convert_to_tensor=True).to_dense()

    assert elsewhere["class"] == "BertForMaskedLM"
    assert (here != 0).sum() > 0
    assert torch.allclose(torch.tensor(elsewhere["vectors"]), here, atol=1e-6, rtol=0)


def test_sparse_card_reports_active_dimensions_and_flops(sparse_run):
    card = (sparse_run / "README.md").read_text()
    round_two = json.loads((round_dir(sparse_run, 2) / "dev_metrics.json").read_text())

    assert "SparseEncoder" in card and "SPLADE" in card and "SpladeLoss" in card
    assert "| query dims | doc dims | FLOPS |" in card
    row = next(line for line in card.splitlines() if line.startswith("| round 2"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[-3:] == [
        str(round(round_two[f"dev_{stat}"], 4)) for stat in ("query_active_dims", "document_active_dims", "flops")
    ]
