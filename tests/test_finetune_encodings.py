"""A fine-tuning run encodes the corpus once per model: the dev evaluation, the next round's mining and the final
test evaluation of the same weights share one encoding, and every metric is the one an independent evaluation gives.

The run is tiny and real (two ANCE-style rounds of the pretraining pipeline's 2-layer model on the SciFact slice);
a spy wraps `encode_document`, so the real model still encodes, and records which weights encoded how many texts.
"""

import json

import pytest
from sentence_transformers import SentenceTransformer

from finetune_helpers import TINY_FINETUNE, finetune, round_dir, weights_checksum
from training.evaluation.collection import load_collection
from training.evaluation.evaluator import RetrievalEvaluator
from training.finetuning.arguments import FinetuningModelArguments
from training.finetuning.data import training_set_from_beir
from training.finetuning.families import DENSE

DEV_FRACTION = 0.3
SEED = 3  # TINY_FINETUNE's --seed


@pytest.fixture(scope="module")
def spied_run(scifact_slice, tiny_seed_dir, tmp_path_factory):
    """Two rounds (BM25 negatives, then re-mined from the round-1 model), test split evaluated at the end; returns
    the output folder and (weights checksum, texts) of every `encode_document` call."""
    out = tmp_path_factory.mktemp("encodings") / "st"
    calls = []
    encode_document = SentenceTransformer.encode_document

    def spy(model, texts, *args, **kwargs):
        calls.append((weights_checksum(model), list(texts)))
        return encode_document(model, texts, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SentenceTransformer, "encode_document", spy)
        assert finetune([
            "--model_name_or_path", tiny_seed_dir, "--data_dir", scifact_slice, "--output_dir", out, *TINY_FINETUNE,
            "--negatives", "self", "--mining_rounds", "2", "--negatives_range_min", "2", "--negatives_range_max", "20",
            "--dev_fraction", DEV_FRACTION, "--eval_split", "test",
        ]) == 0
    return out, calls


def independent_metrics(model, collection, name: str) -> dict:
    """The evaluator's metrics with no cache: the corpus encoded afresh by `model`."""
    return RetrievalEvaluator(collection, name=name, batch_size=32)(model)


def test_the_corpus_is_encoded_once_per_distinct_model(spied_run, scifact_slice):
    _, calls = spied_run
    corpus = list(load_collection(str(scifact_slice), "test").corpus.values())
    corpus_encodings = [checksum for checksum, texts in calls if texts == corpus]

    # The start model (dev evaluation), round 1 (dev evaluation, then round 2's mining) and round 2 (dev
    # evaluation, and the test evaluation of whichever round is best): three models, three encodings.
    assert len(corpus_encodings) == 3
    assert len(set(corpus_encodings)) == 3
    # The other calls are the model cards' few widget examples, no part of the corpus encoded again.
    assert all(len(texts) < 10 for _, texts in calls if texts != corpus)


def test_shared_encodings_give_the_metrics_of_independent_evaluations(spied_run, scifact_slice, tiny_seed_dir):
    out, _ = spied_run
    dev = training_set_from_beir(str(scifact_slice), DEV_FRACTION, None, SEED).dev
    start = DENSE.load(str(tiny_seed_dir), FinetuningModelArguments(str(tiny_seed_dir), max_seq_length=64))
    state = out / "finetuning"

    assert json.loads((state / "start_dev_metrics.json").read_text()) == independent_metrics(start, dev, "dev")
    for number in (1, 2):
        round_model = SentenceTransformer(str(round_dir(out, number) / "model"))
        saved = json.loads((round_dir(out, number) / "dev_metrics.json").read_text())
        assert saved == independent_metrics(round_model, dev, "dev"), number
    test = load_collection(str(scifact_slice), "test")
    assert json.loads((state / "test_metrics.json").read_text()) == independent_metrics(
        SentenceTransformer(str(out)), test, "test"
    )


def test_the_wall_time_breakdown_counts_every_step_and_encoding(spied_run):
    out, _ = spied_run
    timings = json.loads((out / "finetuning" / "timings.json").read_text())
    steps = sum(
        json.loads((round_dir(out, number) / "trainer_state.json").read_text())["global_step"] for number in (1, 2)
    )

    assert timings["training steps"]["count"] == steps
    assert timings["corpus encoding"]["count"] == 3
    assert timings["evaluation"]["count"] == 4  # start, end of round 1, end of round 2, test
    assert timings["mining"]["count"] == 2 and timings["saving"]["count"] == 3
    phases = [row["seconds"] for phase, row in timings.items() if phase != "total"]
    assert all(seconds >= 0 for seconds in phases)
    assert sum(phases) == pytest.approx(timings["total"]["seconds"], abs=0.1)
