"""A label-free training set is written as its passages are read and opened in place: the same pairs, dev split and
few-shot draw, seed for seed, as the in-memory construction it replaced (one random stream over the passages in
order); a process holds views of the written rows, not dicts of them; made of a corpus file, it is a cache entry that
the processes and reruns of one machine open instead of reading the file again, and that a changed file replaces."""

import json
import random

import numpy as np
import pytest

from pretrain_helpers import printed_together
from training.common.errors import InputError
from training.data.corpus_cache import CACHE_VARIABLE
from training.data.packed_corpus import PackedCorpus, PackedCorpusWriter
from training.finetuning import data as data_module
from training.finetuning.arguments import FinetuningDataArguments
from training.finetuning.data import _few_shot, _split_off, made_training_set, training_set_from_passages
from training.finetuning.passage_pairs import RowsOf, few_shot_rows, held_out_split
from training.finetuning.pseudo_queries import CROPS, LEADS, SENTENCES, pseudo_pair


def abstracts(shared_data_dir, count: int) -> list[str]:
    lines = (shared_data_dir / "scifact" / "corpus.jsonl").read_text().splitlines()[:count]
    return [json.loads(line)["text"] for line in lines]


def expected_pairs(passages, kinds, dev_kinds, dev_fraction, max_train_queries, seed):
    """The construction this one replaced, written out: every passage's pair from one stream in order, the dev split
    and the few-shot cut drawn on the ids, the held-out passages' dev pairs from a second stream in order."""
    rng = random.Random(seed)
    pairs = {index: pseudo_pair(passage, None, kinds, rng) for index, passage in enumerate(passages)}
    made = [f"q{index}" for index, pair in pairs.items() if pair is not None]
    training, held_out = _split_off(made, dev_fraction, seed)
    training = _few_shot(training, max_train_queries, seed)
    corpus = {f"d{index}": pair.document for index, pair in pairs.items() if pair is not None}
    dev = {query_id: pairs[int(query_id[1:])].query for query_id in held_out}
    if dev_kinds:
        dev_rng, dev = random.Random(f"dev-{seed}"), {}
        for index in sorted(int(query_id[1:]) for query_id in held_out):
            dev_pair = pseudo_pair(passages[index], None, dev_kinds, dev_rng)
            if dev_pair is not None:
                dev[f"q{index}"], corpus[f"d{index}"] = dev_pair.query, dev_pair.document
    queries = [(query_id, pairs[int(query_id[1:])].query) for query_id in training]
    crops = {query_id for query_id in training if pairs[int(query_id[1:])].kind == CROPS}
    return queries, list(dev.items()), list(corpus.items()), crops


@pytest.mark.parametrize(
    "kinds, dev_kinds, max_train_queries, seed",
    [((SENTENCES,), None, None, 3), ((CROPS, SENTENCES), None, 40, 4), ((SENTENCES,), (LEADS,), 25, 5)],
)
def test_the_written_pairs_are_those_one_stream_over_the_passages_draws(
    shared_data_dir, kinds, dev_kinds, max_train_queries, seed
):
    passages = abstracts(shared_data_dir, 150)
    passages[7] = "Too short."  # one sentence of two words makes no pair of any kind, and draws nothing

    training_set = training_set_from_passages(passages, 0.2, max_train_queries, seed, "scifact", "abstracts", kinds, None, dev_kinds)
    queries, dev, corpus, crops = expected_pairs(passages, kinds, dev_kinds, 0.2, max_train_queries, seed)

    assert list(training_set.queries.items()) == queries  # the texts, and the order examples are made in
    assert list(training_set.dev.queries.items()) == dev  # the order the dev is judged in
    assert list(training_set.corpus.items()) == corpus and "d7" not in training_set.corpus
    assert all(training_set.qrels[query_id] == {f"d{query_id[1:]}": 1} for query_id, _ in queries)
    assert training_set.dev.qrels == {query_id: {f"d{query_id[1:]}": 1} for query_id, _ in dev}
    assert not set(training_set.queries) & set(training_set.dev.queries)
    assert not any(query_id in training_set.queries for query_id, _ in dev)  # a view: held-out ids are not in it
    # fine-tuning draws fresh crops of a crop pair's passage, and of no other
    assert list(training_set.passages) == [query_id for query_id, _ in queries if query_id in crops]
    assert all(training_set.passages[query_id] == passages[int(query_id[1:])] for query_id in crops)
    assert (CROPS in kinds) == bool(crops)


def test_the_split_and_few_shot_draw_on_indices_are_those_drawn_on_the_ids():
    """Ids sort as strings ("q10" before "q2"): a numeric sort would shuffle another order into another split."""
    indices = np.array([index for index in range(230) if index % 7], dtype=np.int64)
    ids = [f"q{index}" for index in indices]

    kept, held_out = held_out_split(indices, 0.15, 9)
    assert ([f"q{i}" for i in kept], [f"q{i}" for i in held_out]) == _split_off(ids, 0.15, 9)
    rows = np.searchsorted(indices, kept)
    assert [f"q{indices[row]}" for row in few_shot_rows(rows, indices, 30, 9)] == _few_shot([f"q{i}" for i in kept], 30, 9)


def test_a_written_corpus_opens_as_the_texts_added_and_refuses_an_id_given_twice(tmp_path):
    documents = {"a": "plain", "b": "café 日本 🙂", "c": "", "q12": "twelve"}
    (tmp_path / "ok").mkdir()
    writer = PackedCorpusWriter(tmp_path / "ok")
    for identifier, text in documents.items():
        writer.add(identifier, text)
    writer.close()
    corpus = PackedCorpus.open(tmp_path / "ok")

    assert dict(corpus.items()) == documents and corpus["b"] == "café 日本 🙂" and "d" not in corpus
    assert dict(RowsOf(corpus, np.array([3, 1])).items()) == {"q12": "twelve", "b": "café 日本 🙂"}
    assert "a" not in RowsOf(corpus, np.array([3, 1]))
    (tmp_path / "twice").mkdir()
    writer = PackedCorpusWriter(tmp_path / "twice")
    for identifier in ("x", "y", "x"):
        writer.add(identifier, identifier)
    with pytest.raises(ValueError, match="'x' was given twice"):
        writer.close()


def label_free(corpus_file, **flags) -> FinetuningDataArguments:
    return FinetuningDataArguments(corpus_file=[str(corpus_file)], pseudo_queries=[SENTENCES], **flags)


def corpus_file_of(path, passages) -> str:
    path.write_text("".join(json.dumps({"_id": str(number), "text": text}) + "\n" for number, text in enumerate(passages)))
    return str(path)


def pair_entries(cache) -> list[str]:
    return sorted(path.name for path in cache.glob("pseudo-pairs-*") if not path.name.endswith(".lock"))


def test_a_corpus_files_pairs_are_cached_opened_by_reruns_and_made_again_when_it_changes(
    tmp_path, monkeypatch, shared_data_dir
):
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    passages = abstracts(shared_data_dir, 60)
    corpus_file = corpus_file_of(tmp_path / "corpus.jsonl", passages)
    first = made_training_set(label_free(corpus_file), 3)

    def unread(*args, **kwargs):
        raise AssertionError("the corpus file was read again")

    monkeypatch.setattr(data_module, "load_raw_corpus", unread)
    again = made_training_set(label_free(corpus_file, max_train_queries=10), 3)
    assert set(again.queries) <= set(first.queries) and len(again.queries) == 10
    assert list(again.corpus.items()) == list(first.corpus.items()) and again.dev.queries == first.dev.queries
    assert len(pair_entries(tmp_path / "cache")) == 1
    with pytest.raises(AssertionError, match="read again"):
        made_training_set(label_free(corpus_file), 4)  # another seed is another entry

    monkeypatch.undo()
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    corpus_file_of(tmp_path / "corpus.jsonl", passages + ["A new passage. It has two sentences."])
    changed = made_training_set(label_free(corpus_file), 3)
    assert len(changed.corpus) == len(first.corpus) + 1 and len(pair_entries(tmp_path / "cache")) == 1


def test_a_corpus_that_makes_too_few_pairs_is_refused_before_anything_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    corpus_file = corpus_file_of(tmp_path / "corpus.jsonl", [f"no sentence end in passage {n} at all" for n in range(40)])

    with pytest.raises(InputError, match="no passage has a sentence end"):
        made_training_set(label_free(corpus_file), 3)
    assert pair_entries(tmp_path / "cache") == []


@pytest.mark.slow  # a run of several processes
def test_processes_starting_together_make_the_pairs_once_and_open_the_same(tmp_path, shared_data_dir):
    corpus_file = corpus_file_of(tmp_path / "corpus.jsonl", abstracts(shared_data_dir, 5183))
    # passage_pairs alone (0.2 s to import, where the fine-tuning arguments take seconds): the lock and the cache are its
    program = (
        "import hashlib, json\n"
        "from training.finetuning import passage_pairs\n"
        "written = passage_pairs.write_passage_pairs\n"
        "def counted(*args):\n"
        "    print('writing', flush=True)\n"
        "    written(*args)\n"
        "passage_pairs.write_passage_pairs = counted\n"
        f"records = lambda: [(json.loads(line)['text'], None) for line in open({corpus_file!r})]\n"
        "training_set = passage_pairs.passage_training_set(\n"
        f"    records, ('sentences',), None, 0.1, None, 3, 'abstracts', 'abstracts', corpus_files=[{corpus_file!r}]\n"
        ")\n"
        "print('made', hashlib.sha256(repr(sorted(training_set.queries.items())).encode()).hexdigest())\n"
    )
    printed = printed_together(program, **{CACHE_VARIABLE: str(tmp_path / "cache")})

    assert printed.count("writing") == 1, printed
    assert len({line for line in printed.splitlines() if line.startswith("made")}) == 1
    assert len(pair_entries(tmp_path / "cache")) == 1
