"""A fine-tuning run encodes the corpus once per model: the dev evaluation, the next round's mining and the final
test evaluation of the same weights share one encoding, and every metric is the one an independent evaluation gives.
The encodings live in the cache `training/evaluate.py` keeps (`--cache_dir`): a start it has evaluated is not encoded
again by the fine-tuning, and the fine-tuned model it evaluates afterwards is read, not encoded.

The run is tiny and real (two ANCE-style rounds of the pretraining pipeline's 2-layer model on the SciFact slice);
a spy wraps `encode_document`, so the real model still encodes, and records which weights encoded how many texts.
"""

import json

import pytest
from sentence_transformers import SentenceTransformer

from finetune_helpers import TINY_FINETUNE, finetune, round_dir, weights_checksum
from training import evaluate
from training.common.timing import breakdown_lines
from training.data.collection import load_collection
from training.evaluation.evaluator import RetrievalEvaluator
from training.finetuning.arguments import FinetuningModelArguments
from training.finetuning.data import training_set_from_beir
from training.finetuning.families import DENSE

DEV_FRACTION = 0.3
SEED = 3  # TINY_FINETUNE's --seed
MAX_SEQ_LENGTH = "64"  # TINY_FINETUNE's --max_seq_length


def evaluate_folder(folder, data_dir, cache_dir, report) -> int:
    """`python training/evaluate.py` on the test split, as a user would run it before or after fine-tuning."""
    return evaluate.main([
        "--data_dir", str(data_dir), "--split", "test", "--max_seq_length", MAX_SEQ_LENGTH,
        "--cache_dir", str(cache_dir), "--output_json", str(report), str(folder),
    ])


@pytest.fixture(scope="module")
def spied_run(scifact_slice, tiny_seed_dir, tmp_path_factory):
    """The start evaluated by `training/evaluate.py`, then two rounds (BM25 negatives, then re-mined from the
    round-1 model) with the test split evaluated at the end, then `training/evaluate.py` on the result, all with one
    cache folder; returns the output folder, the work folder (the cache, evaluate.py's reports) and, for each of
    the three steps, (weights checksum, texts) of every `encode_document` call."""
    work = tmp_path_factory.mktemp("encodings")
    out, cache = work / "st", work / "cache"
    calls = {"start evaluated": [], "fine-tuning": [], "result evaluated": []}
    encode_document = SentenceTransformer.encode_document
    step = []

    def spy(model, texts, *args, **kwargs):
        calls[step[-1]].append((weights_checksum(model), list(texts)))
        return encode_document(model, texts, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SentenceTransformer, "encode_document", spy)
        step.append("start evaluated")
        assert evaluate_folder(tiny_seed_dir, scifact_slice, cache, work / "start.json") == 0
        step.append("fine-tuning")
        assert finetune([
            "--model_name_or_path", tiny_seed_dir, "--data_dir", scifact_slice, "--output_dir", out, *TINY_FINETUNE,
            "--negatives", "self", "--mining_rounds", "2", "--negatives_range_min", "2", "--negatives_range_max", "20",
            "--dev_fraction", DEV_FRACTION, "--eval_split", "test", "--cache_dir", cache,
        ]) == 0
        step.append("result evaluated")
        assert evaluate_folder(out, scifact_slice, cache, work / "result.json") == 0
    return out, work, calls


def corpus_encodings(calls: list, scifact_slice) -> list[float]:
    """The weights checksums of the calls that encoded the whole corpus."""
    corpus = list(load_collection(str(scifact_slice), "test").corpus.values())
    return [checksum for checksum, texts in calls if texts == corpus]


def independent_metrics(model, collection, name: str) -> dict:
    """The evaluator's metrics with no cache: the corpus encoded afresh by `model`."""
    return RetrievalEvaluator(collection, name=name, batch_size=32)(model)


def test_the_corpus_is_encoded_once_per_distinct_model(spied_run, scifact_slice):
    _, _, calls = spied_run
    start, = corpus_encodings(calls["start evaluated"], scifact_slice)
    fine_tuning = corpus_encodings(calls["fine-tuning"], scifact_slice)

    # The start model was encoded by evaluate.py, and its dev evaluation here reads that encoding; round 1 (dev
    # evaluation, then round 2's mining) and round 2 (dev evaluation, and the test evaluation of whichever round is
    # best) are encoded once each.
    assert len(fine_tuning) == 2
    assert len({start, *fine_tuning}) == 3
    # The other calls are the model cards' few widget examples, no part of the corpus encoded again.
    assert sum(len(texts) >= 10 for _, texts in calls["fine-tuning"]) == 2


def test_evaluating_the_fine_tuned_model_reads_the_runs_encoding(spied_run, scifact_slice):
    out, work, calls = spied_run
    report = json.loads((work / "result.json").read_text())
    test_metrics = json.loads((out / "finetuning" / "test_metrics.json").read_text())

    assert corpus_encodings(calls["result evaluated"], scifact_slice) == []
    (row,) = report["results"]
    assert row["stats"]["corpus_from_cache"] == 1.0
    assert {f"test_{name}": value for name, value in row["metrics"].items()} == test_metrics


def test_the_cache_keeps_the_starts_and_the_published_models_encodings_and_no_other_rounds(spied_run, scifact_slice):
    """Each round's weights encoded the corpus once; the run removes the encodings of weights it did not publish,
    and evaluating the result afterwards reads its encoding (see above)."""
    out, work, calls = spied_run
    card = (out / "README.md").read_text()
    published_a_round = "The final model is the starting checkpoint" not in card

    assert len(corpus_encodings(calls["fine-tuning"], scifact_slice)) == 2
    assert len(list((work / "cache").glob("*.npy"))) == 1 + published_a_round  # the start's (evaluate.py wrote it) and a published round's


def test_shared_encodings_give_the_metrics_of_independent_evaluations(spied_run, scifact_slice, tiny_seed_dir):
    out, _, _ = spied_run
    dev = training_set_from_beir(str(scifact_slice), DEV_FRACTION, None, SEED).dev
    start = DENSE.load(str(tiny_seed_dir), FinetuningModelArguments(str(tiny_seed_dir), max_seq_length=int(MAX_SEQ_LENGTH)))
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
    out, _, _ = spied_run
    timings = json.loads((out / "finetuning" / "timings.json").read_text())
    steps = sum(
        json.loads((round_dir(out, number) / "trainer_state.json").read_text())["global_step"] for number in (1, 2)
    )

    assert timings["training steps"]["count"] == steps
    assert timings["corpus encoding"]["count"] == 2  # round 1 and round 2: the start's was read from the cache
    assert timings["evaluation"]["count"] == 4  # start, end of round 1, end of round 2, test
    assert timings["mining"]["count"] == 2 and timings["saving"]["count"] == 3
    assert timings["encoded_texts"] == {}  # what each process encoded of the shared encodings: one process shares none
    phases = [row["seconds"] for phase, row in timings.items() if phase not in ("total", "encoded_texts")]
    assert all(seconds >= 0 for seconds in phases)
    assert sum(phases) == pytest.approx(timings["total"]["seconds"], abs=0.1)
    # The file reads back as the breakdown it was logged as: a line a phase, not one for encoded_texts.
    assert [line.split(":")[0].strip() for line in breakdown_lines(timings)] == [
        phase for phase in timings if phase != "encoded_texts"
    ]
