"""`training/pretrain.py --anchor_loss_weight w`: the loss gains w * (1 - cosine) between the vector the decoder reads
and the vector a frozen copy of the starting encoder gives the same input, so continued pretraining of a trained
retriever (all-MiniLM-L6-v2) moves its vectors less; the anchor is the start even in a resumed run; the term is logged
and on the card; a weight with nothing to hold is refused before anything is written."""

import json

import numpy as np
import pytest

from pretrain_helpers import max_abs_difference, pretrain, weights
from training.common.models import load_sentence_transformer

# Six steps at a rate high enough to move all-MiniLM-L6-v2's vectors measurably on CPU.
MOVING_RUN = [
    "--max_train_samples", "48", "--max_seq_length", "32", "--per_device_train_batch_size", "8", "--max_steps", "6",
    "--learning_rate", "1e-4", "--save_strategy", "no", "--validation_split_percentage", "0", "--report_to", "none",
    "--logging_steps", "1", "--dataloader_pin_memory", "false",
]
PROBES = 32


def abstracts(slice_dir, count: int) -> list[str]:
    lines = (slice_dir / "corpus.jsonl").read_text().splitlines()
    return [json.loads(line)["text"][:300] for line in lines[-count:]]


def drift_from(start, folder, texts: list[str]) -> float:
    """Mean 1 - cosine between the start's and the folder's vectors of `texts`, each as a SentenceTransformer."""
    before = load_sentence_transformer(str(start)).encode(texts, normalize_embeddings=True)
    after = load_sentence_transformer(str(folder)).encode(texts, normalize_embeddings=True)
    return float(np.mean(1 - np.sum(before * after, axis=1)))


@pytest.fixture(scope="module")
def runs(minilm_dir, scifact_slice, tmp_path_factory):
    """The same six steps from all-MiniLM-L6-v2, without the anchor and with weight 10."""
    root = tmp_path_factory.mktemp("anchor")
    folders = {}
    for weight in (0, 10):
        folders[weight] = root / f"anchor-{weight}"
        assert pretrain([
            "--model_name_or_path", minilm_dir, "--train_file", scifact_slice / "corpus.jsonl",
            "--output_dir", folders[weight], *MOVING_RUN, "--anchor_loss_weight", str(weight),
        ]) == 0
    return folders


def test_the_anchor_keeps_the_vectors_nearer_the_starts_than_the_same_run_without_it(runs, minilm_dir, scifact_slice):
    texts = abstracts(scifact_slice, PROBES)
    free, anchored = drift_from(minilm_dir, runs[0], texts), drift_from(minilm_dir, runs[10], texts)

    assert free > 0.01  # the run does move the vectors: there is something to hold
    assert anchored < 0.75 * free  # measured: 0.026 against 0.055


def test_the_anchor_term_is_logged_and_on_the_card_and_absent_without_it(runs):
    logged = json.loads((runs[10] / "trainer_state.json").read_text())["log_history"]
    anchor_terms = [entry["anchor_loss"] for entry in logged if "anchor_loss" in entry]
    assert len(anchor_terms) == 6 and all(0 < term < 1 for term in anchor_terms)
    assert "Held near its start (`--anchor_loss_weight 10.0`)" in (runs[10] / "README.md").read_text()

    unanchored = json.loads((runs[0] / "trainer_state.json").read_text())["log_history"]
    assert not any("anchor_loss" in entry for entry in unanchored)
    assert "Held near its start" not in (runs[0] / "README.md").read_text()


@pytest.mark.slow
def test_a_resumed_anchored_run_holds_to_the_start_not_to_its_checkpoint(minilm_dir, scifact_slice, tmp_path):
    flags = ["--model_name_or_path", minilm_dir, "--train_file", scifact_slice / "corpus.jsonl", *MOVING_RUN,
             "--anchor_loss_weight", "10", "--save_strategy", "steps", "--save_steps", "3"]
    uninterrupted, resumed = tmp_path / "uninterrupted", tmp_path / "resumed"
    assert pretrain([*flags, "--output_dir", uninterrupted]) == 0

    # Steps 4 to 6 again, from the checkpoint of step 3, in a folder of their own.
    assert pretrain([*flags, "--output_dir", resumed, "--resume_from_checkpoint", uninterrupted / "checkpoint-3"]) == 0

    assert max_abs_difference(weights(resumed), weights(uninterrupted)) <= 1e-6


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--config_name", "seed-tiny", "--anchor_loss_weight", "1"],
         "--anchor_loss_weight holds the encoder near where it starts, and a new model's encoder is random"),
        (["--anchor_loss_weight", "1", "--freeze_encoder"],
         "--anchor_loss_weight with --freeze_encoder: a frozen encoder stays where it starts"),
        (["--anchor_loss_weight", "-1"], "--anchor_loss_weight -1.0: must be 0 (off) or positive"),
    ],
    ids=["new-model", "frozen-encoder", "negative"],
)
def test_an_anchor_with_nothing_to_hold_is_refused_before_anything_is_written(
    flags, message, minilm_dir, scifact_slice, tmp_path, capsys
):
    start = [] if "--config_name" in flags else ["--model_name_or_path", minilm_dir]
    out = tmp_path / "out"
    assert pretrain([
        *start, "--train_file", scifact_slice / "corpus.jsonl", "--output_dir", out, *MOVING_RUN, *flags,
    ]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_an_anchor_under_fsdp_loading_weights_on_the_first_process_only_is_refused(
    minilm_dir, scifact_slice, tmp_path, capsys, monkeypatch
):
    # What `accelerate launch` sets for an FSDP config with fsdp_cpu_ram_efficient_loading: true; every process but
    # the first then builds the model on the meta device, and its copy of the start would hold nothing.
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_CPU_RAM_EFFICIENT_LOADING", "true")
    out = tmp_path / "out"
    assert pretrain([
        "--model_name_or_path", minilm_dir, "--train_file", scifact_slice / "corpus.jsonl", "--output_dir", out,
        *MOVING_RUN, "--anchor_loss_weight", "10",
    ]) == 2
    assert "not available with FSDP's fsdp_cpu_ram_efficient_loading" in capsys.readouterr().err
    assert not out.exists()
