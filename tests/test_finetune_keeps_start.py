"""A fine-tuning run never publishes a model that its own dev split found no better than the start.

The start is a candidate like every round: the final model is the best round on dev only when that round beats
the start; else the run says so in one line, the card says so, and the start's weights are published unchanged.
The run below is all-MiniLM-L6-v2 trained at a rate far too high for it (1e-2) on a slice of SciFact, which a
trained retriever does not survive.

With --candidate_starts the start itself is chosen on dev: a run given that wrecked model, with all-MiniLM-L6-v2 as
a candidate (a two-step recipe whose first step lost), trains all-MiniLM-L6-v2 and compares its rounds with it.
"""

import json
import logging

import pytest
import torch

from evaluation_helpers import cut_scifact
from finetune_helpers import PROBE_TEXTS, TINY_FINETUNE, finetune, round_dir
from pretrain_helpers import weights
from training.common.models import load_sentence_transformer
from training.finetuning.arguments import FinetuningModelArguments
from training.finetuning.data import training_set_from_beir
from training.finetuning.model_card import fill_card_data
from training.finetuning.starts import best_round, gain_interval
from training.finetuning.rounds import DEV_METRICS_FILE, RoundPlan, per_query_file
from training.finetuning.run_folder import FinetuningRun
from training.finetuning.starts import best_start


# Judged at its own 256 tokens, all-MiniLM-L6-v2 trained at 64 survives TINY_FINETUNE's 1e-3; ten times that wrecks
# it in two steps (dev nDCG@10 0.90 -> 0.05), so the round stops there rather than run its 6.
WRECKING = ["--learning_rate", "1e-2", "--max_steps", "2"]


class CapturedWarnings(logging.Handler):
    """The pipeline's warnings during the run (module fixtures cannot use `caplog`)."""

    def __enter__(self):
        self.lines = []
        logging.getLogger("training").addHandler(self)
        return self.lines

    def __exit__(self, *exc):
        logging.getLogger("training").removeHandler(self)

    def emit(self, record):
        if record.levelno >= logging.WARNING:
            self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def train_slice(shared_data_dir, tmp_path_factory):
    """SciFact's first 30 training queries, the documents they judge and 20 others (48 in all): every dev evaluation
    encodes the corpus at all-MiniLM-L6-v2's 256 tokens, the length the start is judged and published at."""
    return cut_scifact(shared_data_dir / "scifact", tmp_path_factory.mktemp("train-slice"), {"train": 30}, other_documents=20)


@pytest.fixture(scope="module")
def wrecked_run(minilm_dir, train_slice, tmp_path_factory):
    out = tmp_path_factory.mktemp("wrecked") / "st"
    with CapturedWarnings() as lines:
        assert finetune([
            "--model_name_or_path", minilm_dir, "--data_dir", train_slice, "--output_dir", out, *TINY_FINETUNE,
            "--negatives", "bm25", "--mining_rounds", "1", "--dev_fraction", "0.3", *WRECKING,
        ]) == 0
    return out, lines


def dev_ndcg(path) -> float:
    return json.loads(path.read_text())["dev_ndcg@10"]


def test_a_round_worse_than_the_start_on_dev_is_not_published(wrecked_run, minilm_dir):
    out, _ = wrecked_run
    start, trained = dev_ndcg(out / "finetuning" / "start_dev_metrics.json"), dev_ndcg(round_dir(out, 1) / DEV_METRICS_FILE)
    published, start_weights = weights(out), weights(minilm_dir)

    assert trained < start  # the premise: the rate wrecked the retriever, and the dev split saw it
    # MiniLM's file also holds the position ids, a buffer transformers rebuilds and no longer saves
    assert published.keys() == start_weights.keys() - {"embeddings.position_ids"}
    assert all(torch.equal(published[name], start_weights[name]) for name in published)
    assert weights(round_dir(out, 1) / "model").keys() == published.keys()  # the round's model is kept beside


def test_the_kept_start_encodes_as_the_start_does(wrecked_run, minilm_dir):
    out, _ = wrecked_run
    published = load_sentence_transformer(str(out)).encode(PROBE_TEXTS, convert_to_tensor=True)
    start = load_sentence_transformer(str(minilm_dir)).encode(PROBE_TEXTS, convert_to_tensor=True)

    assert torch.equal(published, start)


def test_the_run_and_the_card_say_the_start_was_kept_and_by_how_much(wrecked_run):
    out, warnings = wrecked_run
    start, trained = dev_ndcg(out / "finetuning" / "start_dev_metrics.json"), dev_ndcg(round_dir(out, 1) / DEV_METRICS_FILE)
    start_per_query = json.loads((out / "finetuning" / "start_dev_metrics_per_query.json").read_text())
    low, high = gain_interval(RoundPlan(1, round_dir(out, 1)).dev_per_query(), start_per_query)
    line = (
        f"No round beat the start on the dev split beyond its noise (dev_ndcg@10, 95% paired bootstrap over "
        f"{len(start_per_query)} queries: round 1 {trained:.3f} vs start {start:.3f}: {trained - start:+.3f} "
        f"[{low:+.3f}, {high:+.3f}]): kept the start, its weights unchanged."
    )
    card = (out / "README.md").read_text()

    assert [warning for warning in warnings if warning.startswith("No round beat the start")] == [
        line + " The rounds' models stay in finetuning/round-N/model."
    ]
    assert "The final model is the starting checkpoint. " + line in card
    assert "| starting checkpoint (final) | dev |" in card and "| round 1 | dev |" in card
    assert "This SentenceTransformer is its starting checkpoint, unchanged" in card and "was fine-tuned" not in card


def test_a_run_trained_at_64_tokens_publishes_the_start_at_its_own_256_and_the_card_says_both(wrecked_run, minilm_dir):
    """The published length is the one the start is served at, not the training length: a kept start encodes a
    text longer than 64 tokens exactly as the start does, and every dev evaluation ran at that length."""
    out, _ = wrecked_run
    long_text = " ".join(["cells divide and differentiate in the developing embryo"] * 50)  # about 400 tokens
    published, start = load_sentence_transformer(str(out)), load_sentence_transformer(str(minilm_dir))

    assert len(start.tokenizer(long_text)["input_ids"]) > 256
    assert published.max_seq_length == start.max_seq_length == 256
    assert torch.equal(published.encode([long_text], convert_to_tensor=True), start.encode([long_text], convert_to_tensor=True))
    assert "- **Lengths**: trained at 64 tokens; published, and judged on dev, at 256 tokens" in (out / "README.md").read_text()


def test_the_kept_starts_card_is_the_starts_own_followed_by_the_runs_section(wrecked_run, minilm_dir):
    """The published model is the start, so its own card still describes it (all-MiniLM-L6-v2's training data,
    licence, usage); the run's section after it says what was tried and why it was not kept."""
    published = (wrecked_run[0] / "README.md").read_text()
    start = (minilm_dir / "README.md").read_text()

    assert published.startswith(start.rstrip())
    assert published.index("## Fine-tuned with seed-encoder") > len(start.rstrip())


DEV_QUERIES = [f"q{index}" for index in range(10)]


def rounds_scoring(tmp_path, *scores) -> list[RoundPlan]:
    """Rounds that score `scores` on every one of the dev queries: no noise, so only the means decide."""
    plans = []
    for number, score in enumerate(scores, start=1):
        plan = RoundPlan(number, tmp_path / f"round-{number}")
        plan.folder.mkdir()
        (plan.folder / DEV_METRICS_FILE).write_text(json.dumps({"dev_ndcg@10": score}))
        per_query_file(plan.folder / DEV_METRICS_FILE).write_text(json.dumps(dict.fromkeys(DEV_QUERIES, score)))
        plans.append(plan)
    return plans


@pytest.mark.parametrize(
    ("round_scores", "start_score", "chosen"),
    [
        ((0.60, 0.70), 0.65, 2),  # the best round beats the start
        ((0.70, 0.60), 0.65, 1),  # the best round need not be the last
        ((0.60, 0.64), 0.65, None),  # no round beats the start: the start
        ((0.65, 0.50), 0.65, None),  # a tie is not a gain: the start, whose weights nobody has to trust anew
    ],
)
def test_the_final_model_is_the_best_round_only_where_it_beats_the_start(tmp_path, round_scores, start_score, chosen):
    best = best_round(rounds_scoring(tmp_path, *round_scores), dict.fromkeys(DEV_QUERIES, start_score), "dev_ndcg@10")

    assert (None if best is None else best.number) == chosen


@pytest.fixture(scope="module")
def candidate_run(wrecked_run, minilm_dir, train_slice, tmp_path_factory):
    """A two-step recipe gone wrong: the start given is the wrecked round (worse than all-MiniLM-L6-v2 on dev), with
    all-MiniLM-L6-v2, the model it came from, as a candidate start; otherwise the wrecked run's flags."""
    wrecked = round_dir(wrecked_run[0], 1) / "model"
    out = tmp_path_factory.mktemp("candidates") / "st"
    with CapturedWarnings() as lines:
        assert finetune([
            "--model_name_or_path", wrecked, "--candidate_starts", minilm_dir, "--data_dir", train_slice,
            "--output_dir", out, *TINY_FINETUNE, "--negatives", "bm25", "--mining_rounds", "1", "--dev_fraction", "0.3",
            *WRECKING,
        ]) == 0
    return out, wrecked, lines


def test_of_the_candidate_starts_the_run_trains_the_best_on_dev_and_compares_its_rounds_with_it(
    candidate_run, wrecked_run, minilm_dir
):
    out, wrecked, _ = candidate_run
    candidates = json.loads((out / "finetuning" / "candidate_starts_dev_metrics.json").read_text())
    minilm_on_dev = dev_ndcg(wrecked_run[0] / "finetuning" / "start_dev_metrics.json")

    assert candidates[str(wrecked)]["dev_ndcg@10"] < candidates[str(minilm_dir)]["dev_ndcg@10"] == minilm_on_dev
    assert dev_ndcg(out / "finetuning" / "start_dev_metrics.json") == minilm_on_dev
    # Trained from all-MiniLM-L6-v2 with the same data and seed, the round is the wrecked run's round again.
    assert json.loads((round_dir(out, 1) / DEV_METRICS_FILE).read_text()) == json.loads(
        (round_dir(wrecked_run[0], 1) / DEV_METRICS_FILE).read_text()
    )
    # No round beat the chosen start: its weights are published, not the given start's.
    published, start_weights = weights(out), weights(minilm_dir)
    assert all(torch.equal(published[name], start_weights[name]) for name in published)


def test_the_log_and_the_card_say_which_start_was_chosen_and_why(candidate_run, minilm_dir):
    out, wrecked, lines = candidate_run
    candidates = json.loads((out / "finetuning" / "candidate_starts_dev_metrics.json").read_text())
    line = (
        f"Started from {minilm_dir}, the best of the candidate starts on the dev split (dev_ndcg@10: "
        f"{wrecked} {candidates[str(wrecked)]['dev_ndcg@10']:.3f}, {minilm_dir} {candidates[str(minilm_dir)]['dev_ndcg@10']:.3f})."
    )
    card = (out / "README.md").read_text()

    assert line in lines
    assert f"- **Starting checkpoint**: `{minilm_dir}` (sentence-transformer). {line}" in card


def test_the_cards_licence_and_base_model_are_the_trained_starts_not_the_given_ones(tmp_path, minilm_dir, scifact_slice):
    """A run that chose a candidate publishes weights that came from it: the card must not declare the licence or
    the Hub id of --model_name_or_path for them."""
    given = tmp_path / "given"
    given.mkdir()
    (given / "README.md").write_text("---\nlicense: mit\n---\n")
    model_args = FinetuningModelArguments(
        model_name_or_path=str(given), candidate_starts=[str(minilm_dir)], base_model="someone/given-retriever"
    )
    model = load_sentence_transformer(str(minilm_dir))
    training_set = training_set_from_beir(str(scifact_slice), 0.3, None, 3)

    fill_card_data(model, model_args, training_set, start_path=str(minilm_dir))
    assert (model.model_card_data.license, model.model_card_data.base_model) == ("apache-2.0", None)
    fill_card_data(model, model_args, training_set, start_path=str(given))
    assert (model.model_card_data.license, model.model_card_data.base_model) == ("mit", "someone/given-retriever")


@pytest.mark.parametrize(
    ("scores", "chosen"),
    [
        ((0.60, 0.70), "candidate-1"),  # a candidate beats --model_name_or_path
        ((0.60, 0.70, 0.65), "candidate-1"),  # the best candidate, not the last
        ((0.70, 0.60, 0.65), "given"),  # no candidate beats --model_name_or_path
        ((0.65, 0.65), "given"),  # a tie keeps the start the user named
    ],
)
def test_the_start_is_the_best_of_the_candidates_on_dev_and_the_one_given_on_a_tie(scores, chosen):
    paths = ["given", *(f"candidate-{number}" for number in range(1, len(scores)))]
    metrics = {path: {"dev_ndcg@10": score} for path, score in zip(paths, scores)}

    assert best_start(paths, metrics, "dev_ndcg@10") == chosen


def test_the_run_reader_says_the_start_was_kept_and_gives_the_dev_metrics_it_was_decided_on(wrecked_run, minilm_dir):
    out, _ = wrecked_run
    run = FinetuningRun(out)

    assert run.published_round is None
    assert [plan.number for plan in run.rounds] == [1]
    assert run.start_dev_metrics["dev_ndcg@10"] == dev_ndcg(out / "finetuning" / "start_dev_metrics.json")
    assert run.round(1).dev_metrics()["dev_ndcg@10"] == dev_ndcg(round_dir(out, 1) / DEV_METRICS_FILE)
    assert run.trained_start == str(minilm_dir) and run.arguments["recipe"]["mining_rounds"] == 1
