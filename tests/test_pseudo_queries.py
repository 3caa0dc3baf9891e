"""Pseudo-queries from a corpus alone (`--pseudo_queries`): crops, sentences (the Inverse Cloze Task), titles and
leads.

On SciFact's real abstracts and titles: a sentence query is cut from the passage it must find in about 90% of the pairs
and is then nowhere in it; a lead is the passage's first sentence, cut as a sentence is; the draw is the seed's; a title
is its record's; mixed kinds give each passage one pair; and a run trains on them end to end and says on its card what
it trained on.
"""

import json
import random
import re

import pytest

from finetune_helpers import TINY_FINETUNE, finetune, round_examples
from training.finetuning.data import titled_passages, training_set_from_passages
from training.finetuning.pseudo_queries import (
    ICT_REMOVAL_RATE, LEADS, SENTENCES, TITLES, pseudo_pair, sentence_pair, split_sentences,
)

# The runs below are judged on what they drew and what their cards say, which the first steps already settle: two
# steps, not a whole epoch of a hundred pseudo-queries and more.
TWO_STEPS = ["--max_steps", "2"]


@pytest.fixture(scope="module")
def abstracts(shared_data_dir) -> list[dict]:
    lines = (shared_data_dir / "scifact" / "corpus.jsonl").read_text().splitlines()[:1000]
    return [json.loads(line) for line in lines]


def test_a_sentence_query_is_cut_from_its_passage_nine_times_in_ten_and_is_then_nowhere_in_it(abstracts):
    rng = random.Random(0)
    pairs = [sentence_pair(record["text"], rng) for record in abstracts if len(split_sentences(record["text"])) >= 2]
    removed = [pair for pair in pairs if pair.removed]

    assert len(pairs) > 900
    assert abs(len(removed) / len(pairs) - ICT_REMOVAL_RATE) < 0.03
    assert all(pair.query not in pair.document for pair in removed)
    assert all(pair.query in pair.document for pair in pairs if not pair.removed)
    # what is left is the passage less that one sentence, in order
    assert all(len(pair.document.split()) + len(pair.query.split()) == len(source.split())
               for pair, source in zip(pairs, [r["text"] for r in abstracts if len(split_sentences(r["text"])) >= 2])
               if pair.removed)


def test_a_lead_is_its_passages_first_sentence_cut_from_it_nine_times_in_ten(abstracts):
    rng = random.Random(0)
    passages = [record["text"] for record in abstracts if len(split_sentences(record["text"])) >= 2]
    pairs = [pseudo_pair(passage, None, (LEADS,), rng) for passage in passages]
    removed = [(pair, passage) for pair, passage in zip(pairs, passages) if pair.removed]

    assert {pair.kind for pair in pairs} == {LEADS}
    assert all(pair.query == split_sentences(passage)[0] for pair, passage in zip(pairs, passages))
    assert abs(len(removed) / len(pairs) - ICT_REMOVAL_RATE) < 0.03
    assert all(pair.document == " ".join(split_sentences(passage)[1:]) for pair, passage in removed)
    assert all(pair.document == passage for pair, passage in zip(pairs, passages) if not pair.removed)


def test_the_same_seed_draws_the_same_pseudo_queries_and_another_seed_others(abstracts):
    passages = [record["text"] for record in abstracts[:200]]

    def drawn(seed):
        training_set = training_set_from_passages(passages, 0.1, None, seed, "scifact", "abstracts", (SENTENCES,))
        return {**training_set.queries, **training_set.dev.queries}, training_set.corpus

    assert drawn(3) == drawn(3)
    assert drawn(3)[0] != drawn(4)[0]


def test_a_title_is_the_query_of_its_own_text(shared_data_dir):
    texts, titles = titled_passages([str(shared_data_dir / "scifact" / "corpus.jsonl")], "text", "title")
    training_set = training_set_from_passages(texts[:100], 0.1, None, 3, "scifact", "abstracts", (TITLES,), titles[:100])
    queries = {**training_set.queries, **training_set.dev.queries}

    assert len(queries) == 100
    for query_id, query in queries.items():
        index = int(query_id.removeprefix("q"))
        assert query == titles[index].strip() and training_set.corpus[f"d{index}"] == texts[index]


def test_mixed_kinds_give_each_passage_one_pair_of_a_kind_it_allows(shared_data_dir):
    texts, titles = titled_passages([str(shared_data_dir / "scifact" / "corpus.jsonl")], "text", "title")
    training_set = training_set_from_passages(
        texts[:300], 0.1, None, 3, "scifact", "abstracts", ("crops", SENTENCES, TITLES), titles[:300]
    )
    queries = {**training_set.queries, **training_set.dev.queries}
    made = dict((kind, int(count)) for count, kind in re.findall(r"(\d+) (crops|sentences|titles)", training_set.description))
    titled = sum(query == titles[int(query_id[1:])].strip() for query_id, query in queries.items())

    assert len(training_set.corpus) == len(queries) == 300  # one document a passage: no passage is its own negative
    assert sum(made.values()) == 300 and all(60 < count < 140 for count in made.values())  # each kind about a third
    assert titled == made["titles"]
    assert set(training_set.passages) <= set(training_set.queries)  # crop queries only, redrawn each epoch


def test_titles_from_a_plain_text_corpus_are_refused_naming_the_file(capsys, tmp_path, tiny_seed_dir):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"passage {index} about one thing and another. And a second sentence.\n" for index in range(20)))
    out = tmp_path / "never-written"

    assert finetune([
        "--model_name_or_path", tiny_seed_dir, "--corpus_file", corpus, "--pseudo_queries", "titles",
        "--output_dir", out, *TINY_FINETUNE,
    ]) == 2
    error = capsys.readouterr().err
    assert f"--corpus_file {corpus}" in error and "JSON lines" in error and not out.exists()


def test_real_queries_with_pseudo_queries_are_refused(capsys, tmp_path, tiny_seed_dir, scifact_slice):
    assert finetune([
        "--model_name_or_path", tiny_seed_dir, "--data_dir", scifact_slice, "--pseudo_queries", "sentences",
        "--output_dir", tmp_path / "out", *TINY_FINETUNE,
    ]) == 2
    assert "--pseudo_queries sentences" in capsys.readouterr().err


def test_a_run_on_sentence_and_title_pseudo_queries_trains_on_them_and_its_card_says_so(scifact_slice, tiny_seed_dir, tmp_path):
    out = tmp_path / "st"
    corpus = scifact_slice / "corpus.jsonl"
    texts, titles = titled_passages([str(corpus)], "text", "title")

    assert finetune([
        "--model_name_or_path", tiny_seed_dir, "--corpus_file", corpus, "--pseudo_queries", "sentences", "titles",
        "--output_dir", out, *TINY_FINETUNE, "--learning_rate", "3e-4", "--negatives", "bm25", *TWO_STEPS,
    ]) == 0
    trained_on = {query_id for query_id, _, _ in round_examples(out, 1)}
    card = (out / "README.md").read_text()

    assert len(trained_on) > 100
    assert "titles" in card and "Inverse Cloze Task" in card
    assert json.loads((out / "finetuning" / "run.json").read_text())["data"]["pseudo_queries"] == ["sentences", "titles"]
    assert len(texts) == len(titles) > 100


def test_a_dev_split_of_another_kind_asks_the_held_out_passages_for_it_and_leaves_training_as_it_was(shared_data_dir):
    texts, titles = titled_passages([str(shared_data_dir / "scifact" / "corpus.jsonl")], "text", "title")
    texts, titles = texts[:300], titles[:300]
    on_titles = training_set_from_passages(texts, 0.1, None, 3, "scifact", "abstracts", (TITLES,), titles)
    judged_on_sentences = training_set_from_passages(
        texts, 0.1, None, 3, "scifact", "abstracts", (TITLES,), titles, dev_kinds=(SENTENCES,)
    )
    dev = judged_on_sentences.dev
    cut_out = [query_id for query_id, query in dev.queries.items() if query not in dev.corpus[f"d{query_id[1:]}"]]

    assert judged_on_sentences.queries == on_titles.queries  # training is the titles it was
    # the same held-out passages (never trained on), less those without two sentences to draw from
    assert set(dev.queries) == {
        query_id for query_id in on_titles.dev.queries if len(split_sentences(texts[int(query_id[1:])])) >= 2
    } and len(dev.queries) > 20
    for query_id, query in dev.queries.items():
        index = int(query_id[1:])
        assert query in split_sentences(texts[index]) and dev.qrels[query_id] == {f"d{index}": 1}
    assert len(cut_out) / len(dev.queries) > 0.7  # the Inverse Cloze Task's cut holds for the dev's documents too
    assert "another kind" in judged_on_sentences.description and "Inverse Cloze Task" in judged_on_sentences.description


def test_a_dev_of_pseudo_queries_for_real_queries_is_refused(capsys, tmp_path, tiny_seed_dir, scifact_slice):
    out = tmp_path / "never-written"

    assert finetune([
        "--model_name_or_path", tiny_seed_dir, "--data_dir", scifact_slice, "--dev_pseudo_queries", "sentences",
        "--output_dir", out, *TINY_FINETUNE,
    ]) == 2
    assert "--dev_pseudo_queries sentences" in capsys.readouterr().err and not out.exists()


def test_a_run_trained_on_titles_and_judged_on_sentences_says_so_on_its_card(scifact_slice, tiny_seed_dir, tmp_path):
    out = tmp_path / "titles-judged-on-sentences"

    assert finetune([
        "--model_name_or_path", tiny_seed_dir, "--corpus_file", scifact_slice / "corpus.jsonl",
        "--pseudo_queries", "titles", "--dev_pseudo_queries", "sentences", "--output_dir", out, *TINY_FINETUNE,
        *TWO_STEPS,
    ]) == 0
    trained_on = {int(query_id[1:]) for query_id, _, _ in round_examples(out, 1)}
    card = (out / "README.md").read_text()

    assert len(trained_on) > 100 and "another kind" in card and "Inverse Cloze Task" in card
    assert json.loads((out / "finetuning" / "run.json").read_text())["data"]["dev_pseudo_queries"] == ["sentences"]
