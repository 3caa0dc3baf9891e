"""A BEIR corpus is read into one UTF-8 buffer and reads back as the dict of its texts would: the same documents, in
the same order, under the same fingerprint (so an embedding cache written from a dict is still found), handed to
encoders a chunk at a time; a teacher finds a text's row without keying a second copy of every text."""

import json
from pathlib import Path

import pytest

from evaluation_helpers import write_collection
from training.common.errors import InputError
from training.data import packed_corpus
from training.data.collection import load_corpus
from training.data.packed_corpus import PackedCorpus, RowsByText, text_chunks
from training.data.fingerprint import corpus_fingerprints
from training.finetuning.data import training_set_from_passages

QUERIES = [{"_id": "q1", "text": "first"}]
# Texts of one, two, three and four UTF-8 bytes a character, and an empty one.
DOCUMENTS = {"a": "plain ascii", "b": "café au lait", "c": "", "d": "日本語の文", "e": "emoji 🙂 end"}


def written(tmp_path, documents: dict[str, str]):
    return write_collection(tmp_path, [{"_id": key, "text": text} for key, text in documents.items()], QUERIES, {})


def test_a_packed_corpus_reads_back_every_text_in_file_order(tmp_path):
    corpus = load_corpus(str(written(tmp_path, DOCUMENTS)))

    assert isinstance(corpus, PackedCorpus)
    assert list(corpus.items()) == list(DOCUMENTS.items())
    assert [corpus.text_at(row) for row in range(len(corpus))] == list(DOCUMENTS.values())
    assert corpus.texts(1, 4) == ["café au lait", "", "日本語の文"]
    assert corpus.text_bytes == sum(len(text.encode()) for text in DOCUMENTS.values())
    assert "b" in corpus and "z" not in corpus
    with pytest.raises(KeyError):
        corpus["z"]


def test_scifact_reads_as_the_dict_of_its_titles_and_texts_with_the_same_fingerprint(shared_data_dir):
    path = shared_data_dir / "scifact" / "corpus.jsonl"
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    as_dict = {str(r["_id"]): f"{r['title']} {r['text']}" if r.get("title") else r["text"] for r in records}

    corpus = load_corpus(str(path.parent))

    assert list(corpus.items()) == list(as_dict.items())
    assert corpus_fingerprints(corpus) == corpus_fingerprints(as_dict)


@pytest.mark.parametrize("kind", [dict, PackedCorpus.from_items])
def test_text_chunks_hand_out_every_text_once_in_order(kind):
    corpus = kind(DOCUMENTS.items())

    chunks = list(text_chunks(corpus, 2))

    assert [len(chunk) for chunk in chunks] == [2, 2, 1]
    assert [text for chunk in chunks for text in chunk] == list(DOCUMENTS.values())


def test_a_repeated_id_is_refused_naming_both_lines(tmp_path):
    folder = write_collection(
        tmp_path, [{"_id": "a", "text": "x"}, {"_id": "b", "text": "y"}, {"_id": "a", "text": "z"}], QUERIES, {}
    )

    with pytest.raises(InputError, match=r"corpus\.jsonl, line 3: _id 'a' was already used on line 1"):
        load_corpus(str(folder))


def test_a_corpus_that_is_not_utf8_is_refused_naming_the_file(tmp_path):
    folder = written(tmp_path, {"a": "x"})
    (folder / "corpus.jsonl").write_bytes('{"_id": "a", "text": "caf\u00e9"}\n'.encode("latin-1"))

    with pytest.raises(InputError, match=r"corpus\.jsonl: not UTF-8 text .*Save the file as UTF-8"):
        load_corpus(str(folder))


@pytest.mark.parametrize("colliding_hashes", [False, True])
def test_rows_by_text_give_the_last_row_of_each_text(colliding_hashes, monkeypatch):
    if colliding_hashes:  # every text hashes alike: the rows must still be told apart by their texts
        monkeypatch.setattr(packed_corpus, "hash", lambda text: 0, raising=False)
    corpus = PackedCorpus.from_items([("a", "one"), ("b", "two"), ("c", "one"), ("d", "three"), ("e", "two")])

    rows = RowsByText(corpus)

    assert [rows["one"], rows["two"], rows["three"]] == [2, 4, 3]
    with pytest.raises(KeyError):
        rows["four"]


@pytest.mark.parametrize("colliding_hashes", [False, True])
def test_a_saved_corpus_opens_with_every_id_at_its_row(tmp_path, colliding_hashes, monkeypatch):
    """Opened from its folder (the corpus cache), a corpus keeps nothing of its own: its ids are read from the map and
    an id's row is found by a saved index of hashes, which must tell apart ids whose hashes collide."""
    if colliding_hashes:
        monkeypatch.setattr(packed_corpus, "id_hash", lambda identifier: 7)
    PackedCorpus.from_items(DOCUMENTS.items()).save(tmp_path)

    corpus = PackedCorpus.open(tmp_path)

    assert list(corpus.items()) == list(DOCUMENTS.items()) and list(corpus.values()) == list(DOCUMENTS.values())
    assert list(corpus.ids) == list(DOCUMENTS) and corpus.ids[-1] == "e" and corpus.ids[1:3] == ["b", "c"]
    assert [corpus.rows[identifier] for identifier in reversed(DOCUMENTS)] == [4, 3, 2, 1, 0]
    assert [corpus[identifier] for identifier in DOCUMENTS] == list(DOCUMENTS.values())
    assert "z" not in corpus and 3 not in corpus and corpus.rows.get("z") is None
    with pytest.raises(KeyError):
        corpus["z"]
    with pytest.raises(IndexError):
        corpus.ids[5]


def resident_file_bytes() -> int:
    """This process's resident file-backed memory (Linux's /proc/self/status)."""
    (line,) = [line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("RssFile:")]
    return int(line.split()[1]) * 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's /proc/self/status")
def test_an_opened_corpus_leaves_none_of_its_texts_resident_in_the_process(tmp_path):
    """Building an index or scoring training pairs reads every text, whole or by id: from a memory map, each page
    read stayed resident in the process (0.7 GB at 1M passages); read from the file, it is the page cache's."""
    documents = {f"d{n}": f"passage {n} " + "word " * 200 for n in range(16_000)}  # 16 MB of text
    PackedCorpus.from_items(documents.items()).save(tmp_path)
    corpus = PackedCorpus.open(tmp_path)
    assert corpus["d0"] == documents["d0"]  # the ids' map and the code paths touched once
    before = resident_file_bytes()

    whole = [text for texts in text_chunks(corpus, 1_000) for text in texts]
    by_id = [corpus[identifier] for identifier in reversed(corpus.ids)]

    assert whole == list(documents.values()) and by_id == whole[::-1] and corpus.text_bytes > 16_000_000
    assert resident_file_bytes() - before < corpus.text_bytes / 8


def test_a_training_set_made_of_passages_holds_its_corpus_packed_and_judges_dev_on_the_same_one():
    passages = [f"Passage {n} opens with a sentence about topic {n}. It closes with another one on item {n}." for n in range(40)]
    as_made = {}

    training_set = training_set_from_passages(passages, 0.25, None, 1, "synthetic", "synthetic", ("sentences",))

    assert isinstance(training_set.corpus, PackedCorpus)
    assert training_set.dev.corpus is training_set.corpus
    for query_id, judged in {**training_set.qrels, **training_set.dev.qrels}.items():
        (document_id,) = judged
        as_made[document_id] = training_set.corpus[document_id]
        assert document_id == query_id.replace("q", "d") and as_made[document_id] in passages[int(document_id[1:])]
    assert len(as_made) == len(training_set.corpus) == 40
