"""Reading a BEIR-layout collection: what becomes a document, which lines are judgments, which queries count."""

import pytest

from evaluation_helpers import read_jsonl, write_collection
from training.common.errors import InputError
from training.data.collection import load_collection, load_corpus, load_qrels

QUERIES = [{"_id": "q1", "text": "first"}, {"_id": "q2", "text": "second"}]


def test_documents_are_title_and_text_joined_by_a_space_or_the_text_alone(tmp_path):
    corpus = [
        {"_id": "a", "title": "Aspirin", "text": "lowers fever."},
        {"_id": "b", "title": "", "text": "no title here."},
        {"_id": "c", "text": "title field missing."},
        {"_id": 7, "title": "Numeric", "text": "ids become strings."},
    ]
    folder = write_collection(tmp_path, corpus, QUERIES, {"test": [("q1", "a", 1)]})

    assert load_corpus(str(folder)) == {
        "a": "Aspirin lowers fever.",
        "b": "no title here.",
        "c": "title field missing.",
        "7": "Numeric ids become strings.",
    }


def test_qrels_header_is_skipped_and_files_without_one_or_in_trec_form_read_the_same(tmp_path):
    folder = write_collection(tmp_path, [{"_id": "a", "text": "x"}, {"_id": "b", "text": "y"}], QUERIES, {})
    (folder / "qrels" / "beir.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ta\t2\nq1\tb\t0\n")
    (folder / "qrels" / "bare.tsv").write_text("q1\ta\t2\nq1\tb\t0\n")
    (folder / "qrels" / "trec.tsv").write_text("q1 0 a 2\nq1 0 b 0\n")

    expected = {"q1": {"a": 2, "b": 0}}
    assert load_qrels(str(folder), "beir") == load_qrels(str(folder), "bare") == load_qrels(str(folder), "trec") == expected


def test_queries_are_only_the_judged_ones_of_the_split(tmp_path):
    corpus = [{"_id": "a", "text": "x"}]
    folder = write_collection(tmp_path, corpus, QUERIES, {"test": [("q2", "a", 1)], "train": [("q1", "a", 1)]})

    collection = load_collection(str(folder), "test")

    assert collection.queries == {"q2": "second"}
    assert collection.corpus == {"a": "x"}
    assert collection.name == f"{folder.name}/test"


def test_skip_unknown_ids_leaves_out_only_the_judgments_naming_missing_ids(tmp_path):
    corpus = [{"_id": "a", "text": "x"}, {"_id": "b", "text": "y"}]
    judgments = [("q1", "a", 1), ("q1", "gone", 1), ("q-gone", "b", 1), ("q2", "b", 2)]
    folder = write_collection(tmp_path, corpus, QUERIES, {"test": judgments})

    with pytest.raises(InputError):
        load_collection(str(folder), "test")
    collection = load_collection(str(folder), "test", skip_unknown_ids=True)

    assert collection.qrels == {"q1": {"a": 1}, "q2": {"b": 2}}


def test_scifact_test_split_has_its_300_queries_and_5183_documents(shared_data_dir):
    collection = load_collection(str(shared_data_dir / "scifact"), "test")

    assert len(collection.queries) == 300
    assert len(collection.corpus) == 5183
    assert sum(len(judged) for judged in collection.qrels.values()) == 339
    first = read_jsonl(shared_data_dir / "scifact" / "corpus.jsonl")[0]
    assert collection.corpus[str(first["_id"])] == f"{first['title']} {first['text']}"
