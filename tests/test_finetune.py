"""`training/finetune.py`: a SEED pretraining folder becomes a Siamese SentenceTransformer retriever.

Runs are tiny and real: the pretraining pipeline's 2-layer model, sentence-transformers' trainer,
BM25 and the model's own index over a slice of SciFact (30 train and 30 test queries, ~200 documents).
"""

import json
import re

import pytest
import torch
from huggingface_hub import ModelCard
from sentence_transformers import SentenceTransformer

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
from pretrain_helpers import max_abs_difference, weights
from training.common.models import load_sentence_transformer
from training.data.collection import load_collection
from training.evaluation.retrievers import dense
from training.common.errors import InputError
from training.finetuning.data import training_set_from_beir
from training.finetuning.run_folder import FinetuningRun


@pytest.fixture(scope="module")
def self_mined(scifact_slice, tiny_seed_dir, tmp_path_factory):
    """Two rounds: BM25 negatives, then negatives re-mined from the model after round 1, searched in chunks, from an
    IVF index that searches all of its lists (the slice's 203 documents make 5): it ranks as exact search does."""
    out = tmp_path_factory.mktemp("self-mined") / "st"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dense, "SEARCH_CHUNK", 4)  # round 2 mines its 21 queries in 6 chunks
        assert finetune([
            "--model_name_or_path", tiny_seed_dir, "--data_dir", scifact_slice, "--output_dir", out, *TINY_FINETUNE,
            "--negatives", "self", "--mining_rounds", "2", "--negatives_range_min", "2", "--negatives_range_max", "20",
            "--dev_fraction", "0.3", "--learning_rate", "3e-4",  # at TINY_FINETUNE's 1e-3 no round beats the start
            "--mining_index", "ivf", "--mining_nprobe", "5",
        ]) == 0
    return out


def test_training_examples_leave_the_held_out_dev_queries_out(self_mined, scifact_slice):
    """30 training queries, 30% held out for dev: every round trains on the 21 others, each of them."""
    for round_number in (1, 2):
        trained_on = {query_id for query_id, _, _ in round_examples(self_mined, round_number)}
        assert len(trained_on) == 21 and trained_on <= set(judged_positives(scifact_slice))


def test_mined_negatives_never_contain_a_judged_positive(self_mined, scifact_slice):
    positives = judged_positives(scifact_slice)
    for round_number in (1, 2):
        examples = round_examples(self_mined, round_number)
        assert examples
        for query_id, positive_id, negatives in examples:
            assert positive_id in positives[query_id]
            assert not set(negatives) & positives[query_id], (round_number, query_id)


def test_second_round_re_mines_from_the_model_trained_in_the_first(self_mined, scifact_slice):
    first, second = round_examples(self_mined, 1), round_examples(self_mined, 2)
    round_one_model = SentenceTransformer(str(round_dir(self_mined, 1) / "model"))

    assert [negatives for *_, negatives in first] != [negatives for *_, negatives in second]
    assert_drawn_from_ranks(round_one_model, load_collection(str(scifact_slice), "train"), second, low=2, high=20)


def test_model_fine_tuned_from_a_seed_checkpoint_is_published_as_plain_bert(self_mined):
    """What text-embeddings-inference (TEI) and the other serving tools read: model_type bert, no code, a fast
    tokenizer, the maximum input length, and the pooling as TEI's booleans ([CLS], not mean)."""
    pooling = json.loads((self_mined / "1_Pooling" / "config.json").read_text())

    assert plain_bert_files(self_mined) == {
        "model_type": "bert", "architectures": ["BertModel"], "auto_map": False, "code_files": [],
        "tokenizer.json": True, "max_seq_length": 64,
    }
    assert (pooling["pooling_mode"], pooling["pooling_mode_cls_token"], pooling["pooling_mode_mean_tokens"]) == (
        "cls", True, False
    )


def test_published_model_encodes_the_same_vectors_where_seed_encoder_is_not_installed(self_mined, plain_python, tmp_path):
    elsewhere = encoded_in_plain_environment(plain_python, "SentenceTransformer", self_mined, tmp_path)
    here = load_sentence_transformer(str(self_mined)).encode(PROBE_TEXTS, convert_to_tensor=True)

    assert elsewhere["class"] == "BertModel"
    assert torch.allclose(torch.tensor(elsewhere["vectors"]), here, atol=1e-6, rtol=0)


def published_round(self_mined) -> int | None:
    """The round the run published, by its own card (None: it kept the start)."""
    card = (self_mined / "README.md").read_text()
    found = re.search(r"The final model is round (\d+)\.", card)
    return int(found.group(1)) if found else None


def test_final_model_is_the_best_round_on_dev_where_it_beat_the_start_and_its_card_tells_the_recipe(self_mined, tiny_seed_dir):
    """The 9 dev queries of the slice rarely show a tiny SEED model's gain beyond their noise (here it gained on one
    query: +0.007 [+0.000, +0.022], kept); whichever the guard decided, the weights and the card are its choice."""
    dev_ndcg = {
        number: json.loads((round_dir(self_mined, number) / "dev_metrics.json").read_text())["dev_ndcg@10"]
        for number in (1, 2)
    }
    start = json.loads((self_mined / "finetuning" / "start_dev_metrics.json").read_text())["dev_ndcg@10"]
    card = (self_mined / "README.md").read_text()
    chosen = published_round(self_mined)

    if chosen is None:
        assert "The final model is the starting checkpoint. No round beat the start" in card
        published = load_sentence_transformer(str(self_mined))
        start = load_sentence_transformer(str(tiny_seed_dir), max_seq_length=published.max_seq_length)
        assert torch.equal(published.encode(PROBE_TEXTS, convert_to_tensor=True), start.encode(PROBE_TEXTS, convert_to_tensor=True))
    else:
        assert dev_ndcg[chosen] == max(dev_ndcg.values()) and dev_ndcg[chosen] > start
        assert max_abs_difference(weights(self_mined), weights(round_dir(self_mined, chosen) / "model")) == 0.0
    assert "ANCE-style" in card and "MultipleNegativesRankingLoss" in card
    assert "searched approximately (a faiss IVF index, 5 lists a query)" in card
    assert "decoder of attention span 2" in card  # the SEED starting checkpoint's decoder
    assert (self_mined / "training_curves.png").stat().st_size > 0


def test_card_names_base_model_language_licence_and_data_and_shows_dev_queries_with_their_documents(
    self_mined, scifact_slice, tiny_seed_dir
):
    card = ModelCard.load(self_mined / "README.md")
    dev = training_set_from_beir(str(scifact_slice), 0.3, None, 3).dev  # the fixture's --dev_fraction and --seed
    judged_texts = {
        dev.queries[query_id]: {dev.corpus[doc] for doc, relevance in judged.items() if relevance > 0}
        for query_id, judged in dev.qrels.items()
    }

    assert card.data.base_model is None  # the start is a local folder, and no --base_model was given: the Hub
    assert f"**Starting checkpoint**: `{tiny_seed_dir}`" in card.text  # would refuse a path in the metadata
    assert card.data.language == ["en"]
    assert card.data.license == "apache-2.0"  # the SEED pretraining folder's card's, no --license given
    if published_round(self_mined) is not None:  # a kept start's weights never saw the training data
        assert f"- {scifact_slice.name}\n" in card.text  # the training dataset, by the collection's folder name
    assert "Unknown" not in re.sub(r"<!--.*?-->", "", card.text, flags=re.DOTALL)  # none visible on the Hub
    assert len(card.data.widget) == 3
    for example in card.data.widget:
        documents = set().union(*judged_texts.values())
        assert example["sentences"][0] in judged_texts[example["source_sentence"]]
        assert len(example["sentences"]) == 3 and set(example["sentences"]) <= documents



def test_the_run_reader_names_the_round_the_card_says_was_published(self_mined):
    run = FinetuningRun(self_mined)

    published = run.published_round
    assert (published.number if published else None) == published_round(self_mined)
    assert [plan.number for plan in run.rounds] == [1, 2]
    assert run.round(2).dev_metrics() == json.loads((round_dir(self_mined, 2) / "dev_metrics.json").read_text())
    assert len(run.round_examples(1)["examples"]) > 0


def test_the_run_reader_refuses_a_folder_that_holds_no_run(tmp_path):
    with pytest.raises(InputError, match="not the --output_dir of a fine-tuning run"):
        FinetuningRun(tmp_path)
