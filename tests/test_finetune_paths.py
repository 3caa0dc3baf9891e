"""Fine-tuning paths checked against numbers computed here, independently of the package: a collection with its own
dev split, `--eval_strategy steps` with `--load_best_model_at_end`, `--eval_split test`, and a `--train_file` of
pairs with `--negatives none`, without negatives and with its own.

The dev-split run starts from splade-tiny as a dense [CLS] model: its similarities spread, so what training does to
the rankings shows, and every reported metric can be recomputed by brute force (numpy over all documents) and
compared exactly. Dense search runs over several chunks of queries (a small `SEARCH_CHUNK`) throughout.
"""

import json

import pytest
from sentence_transformers import SentenceTransformer

from evaluation_helpers import brute_force_ndcg_at_10, read_jsonl, write_jsonl
from finetune_helpers import TINY_FINETUNE, finetune, round_dir, round_examples, with_dev_split
from training.common.models import load_sentence_transformer
from training.data.collection import load_collection
from training.evaluation.retrievers import dense
from training.finetuning.data import training_set_from_pairs

EVAL_STEPS = 3  # each round trains 8 steps: evaluated at steps 3, 6 and (the round's end) 8
PAIRS = 40


@pytest.fixture(scope="module")
def dev_split(scifact_slice, tmp_path_factory):
    """The slice with its last 10 training queries moved to qrels/dev.tsv (20 training queries remain)."""
    return with_dev_split(scifact_slice, tmp_path_factory.mktemp("dev-split") / "scifact", dev_queries=10)


@pytest.fixture(scope="module")
def dev_split_run(dev_split, splade_tiny_dir, tmp_path_factory):
    """Two self-mining rounds from splade-tiny (dense, [CLS]), evaluated on dev every 3 steps, each round ending
    with its best checkpoint's weights; the final model evaluated on test."""
    out = tmp_path_factory.mktemp("dev-split-run") / "st"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dense, "SEARCH_CHUNK", 3)
        assert finetune([
            "--model_name_or_path", splade_tiny_dir, "--pooling", "cls", "--data_dir", dev_split, "--output_dir", out,
            *TINY_FINETUNE, "--negatives", "self", "--mining_rounds", "2", "--negatives_range_min", "2",
            "--negatives_range_max", "20", "--eval_strategy", "steps", "--eval_steps", EVAL_STEPS, "--eval_split", "test",
            "--save_steps", EVAL_STEPS, "--load_best_model_at_end", "--metric_for_best_model", "eval_dev_ndcg@10",
        ]) == 0
    return out


def dev_ndcg(output_dir, round_number: int) -> float:
    return json.loads((round_dir(output_dir, round_number) / "dev_metrics.json").read_text())["dev_ndcg@10"]


def test_the_collections_dev_split_selects_the_model_and_is_never_trained_on(dev_split_run, dev_split):
    train, dev = load_collection(str(dev_split), "train"), load_collection(str(dev_split), "dev")

    for round_number in (1, 2):
        trained_on = {query_id for query_id, _, _ in round_examples(dev_split_run, round_number)}
        assert trained_on == set(train.queries) and not trained_on & set(dev.queries)
    assert "dev: the collection's dev split" in (dev_split_run / "README.md").read_text()


def test_each_rounds_dev_metrics_are_those_of_its_saved_model(dev_split_run, dev_split):
    """Whichever step the saved weights come from: round 2's best checkpoint is an earlier step than its last."""
    dev = load_collection(str(dev_split), "dev")
    best_steps = []

    for round_number in (1, 2):
        folder = round_dir(dev_split_run, round_number)
        state = json.loads((folder / "trainer_state.json").read_text())
        assert [entry["step"] for entry in state["log_history"] if "eval_dev_ndcg@10" in entry][:3] == [3, 6, 8]
        best_steps.append(state["best_global_step"])
        saved = SentenceTransformer(str(folder / "model"))
        assert dev_ndcg(dev_split_run, round_number) == pytest.approx(brute_force_ndcg_at_10(saved, dev), abs=1e-9)
    assert best_steps == [8, 3]


def test_test_metrics_are_the_final_models_on_the_test_split(dev_split_run, dev_split):
    test = load_collection(str(dev_split), "test")
    reported = json.loads((dev_split_run / "finetuning" / "test_metrics.json").read_text())["test_ndcg@10"]

    # Round 1 is the best on dev, so the final model is not the model trained last (round 2).
    assert dev_ndcg(dev_split_run, 1) > dev_ndcg(dev_split_run, 2)
    assert "The final model is round 1" in (dev_split_run / "README.md").read_text()
    assert reported == pytest.approx(brute_force_ndcg_at_10(SentenceTransformer(str(dev_split_run)), test), abs=1e-9)
    assert reported != pytest.approx(dev_ndcg(dev_split_run, 1))
    assert f"| final | test | {round(reported, 4)} |" in (dev_split_run / "README.md").read_text()


def test_a_round_learns_its_training_pairs(dev_split_run, dev_split, splade_tiny_dir):
    """Its judged positives rise to the top for the training queries: a round trained on wrong positives or
    negatives (a shuffled column, a negative that is the positive) would not do this."""
    train = load_collection(str(dev_split), "train")
    start = load_sentence_transformer(str(splade_tiny_dir), pooling="cls", max_seq_length=64)
    trained = SentenceTransformer(str(round_dir(dev_split_run, 1) / "model"))

    before, after = brute_force_ndcg_at_10(start, train), brute_force_ndcg_at_10(trained, train)

    assert before < 0.5 and after > 0.9, (before, after)


@pytest.fixture(scope="module")
def pairs_file(shared_data_dir, tmp_path_factory):
    """The first 40 PubMedQA (question, abstract) pairs as a --train_file: query and positive, no negatives."""
    records = read_jsonl(shared_data_dir / "pubmedqa" / "pairs.jsonl")[:PAIRS]
    path = tmp_path_factory.mktemp("pairs") / "pubmedqa.jsonl"
    return write_jsonl(path, [{"query": record["query"], "positive": record["positive"]} for record in records])


@pytest.fixture(scope="module")
def pairs_run(pairs_file, tiny_seed_dir, tmp_path_factory):
    """One round on the pairs with in-batch negatives only."""
    out = tmp_path_factory.mktemp("pairs-run") / "st"
    assert finetune([
        "--model_name_or_path", tiny_seed_dir, "--train_file", pairs_file, "--output_dir", out, *TINY_FINETUNE,
        "--negatives", "none", "--max_steps", "3",
    ]) == 0
    return out


def test_pairs_file_trains_on_its_pairs_with_in_batch_negatives_only(pairs_run, pairs_file):
    pairs = {(record["query"], record["positive"]) for record in read_jsonl(pairs_file)}
    # The file's ids are its texts' hashes: the training set maps them back to the texts.
    texts = training_set_from_pairs(str(pairs_file), 0.1, None, seed=3)
    examples = round_examples(pairs_run, 1)

    trained_on = {(texts.queries[query_id], texts.corpus[positive]) for query_id, positive, _ in examples}
    assert trained_on <= pairs and len(trained_on) == len(examples) == PAIRS - 4  # 10% held out for dev
    assert all(negatives == [] for _, _, negatives in examples)
    assert not {query for query, _ in trained_on} & set(texts.dev.queries.values())
    state = json.loads((round_dir(pairs_run, 1) / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    card = (pairs_run / "README.md").read_text()
    assert "in-batch" in card and "`pubmedqa.jsonl`" in card
    assert SentenceTransformer(str(pairs_run)).encode(["a question"]).shape == (1, 64)


def test_pairs_file_with_its_own_negatives_trains_on_those_negatives_with_negatives_none(
    shared_data_dir, tiny_seed_dir, tmp_path
):
    """Each line brings two negatives (the abstracts of the next two lines); with --negatives none nothing is mined,
    and each example's one negative (--negatives_per_query, default 1) is one of its own line's."""
    records = read_jsonl(shared_data_dir / "pubmedqa" / "pairs.jsonl")[:PAIRS]
    lines = [
        {"query": record["query"], "positive": record["positive"],
         "negatives": [records[(index + 1) % PAIRS]["positive"], records[(index + 2) % PAIRS]["positive"]]}
        for index, record in enumerate(records)
    ]
    pairs_file = write_jsonl(tmp_path / "with-negatives.jsonl", lines)
    out = tmp_path / "st"

    assert finetune([
        "--model_name_or_path", tiny_seed_dir, "--train_file", pairs_file, "--output_dir", out, *TINY_FINETUNE,
        "--negatives", "none", "--max_steps", "2",
    ]) == 0

    texts = training_set_from_pairs(str(pairs_file), 0.1, None, seed=3)
    given = {line["query"]: (line["positive"], set(line["negatives"])) for line in lines}
    examples = round_examples(out, 1)
    assert len(examples) == PAIRS - 4  # 10% held out for dev
    for query_id, positive_id, negative_ids in examples:
        positive, negatives = given[texts.queries[query_id]]
        assert texts.corpus[positive_id] == positive
        assert len(negative_ids) == 1 and texts.corpus[negative_ids[0]] in negatives
