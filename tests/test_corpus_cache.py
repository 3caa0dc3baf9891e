"""A BEIR corpus is read from its file once and kept packed in the user's cache; every later read, by this process or
another, maps the cached texts instead (the processes of one machine share them), until the file changes. A bad file
is refused before anything is cached, and processes starting together read the file once between them."""

import json
import logging
import os
import pickle

import pytest

from evaluation_helpers import write_collection
from pretrain_helpers import printed_together
from training.common.errors import InputError
from training.data import collection as collection_module
from training.data.collection import load_corpus
from training.data.corpus_cache import CACHE_VARIABLE, corpus_cache_dir
from training.data.fingerprint import corpus_fingerprints
from training.data.packed_corpus import PackedCorpus, TextsFile

QUERIES = [{"_id": "q1", "text": "first"}]


def written(folder, documents: dict[str, str]):
    return write_collection(folder, [{"_id": key, "text": text} for key, text in documents.items()], QUERIES, {})


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "corpora"))
    return tmp_path / "corpora"


@pytest.fixture
def reads(monkeypatch):
    """How many times the corpus file itself was read."""
    counted = []
    read = collection_module._read_corpus

    def counting(path):
        counted.append(path)
        return read(path)

    monkeypatch.setattr(collection_module, "_read_corpus", counting)
    return counted


def entries(cache) -> list[str]:
    return sorted(path.name for path in cache.iterdir() if not path.name.endswith(".lock"))


@pytest.mark.parametrize("documents", [{"a": "plain", "b": "café 日本 🙂", "c": ""}, {"a": "", "b": ""}])
def test_a_corpus_is_read_once_then_mapped_from_the_cache(tmp_path, cache, reads, documents):
    folder = written(tmp_path / "beir", documents)

    first, second = load_corpus(str(folder)), load_corpus(str(folder))

    assert len(reads) == 1 and len(entries(cache)) == 1
    assert dict(first) == dict(second) == documents and list(second) == list(documents)
    assert isinstance(second._buffer, TextsFile)


def test_a_mapped_corpus_pickles_as_its_folder_and_maps_it_again(tmp_path, cache):
    """Pickled (e.g. to a worker process), a mapped corpus travels as its folder, not its texts, and maps them again;
    one in memory travels whole."""
    documents = {"a": "plain", "b": "café 日本 🙂"}
    mapped = load_corpus(str(written(tmp_path / "beir", documents)))

    sent = pickle.dumps(mapped)
    in_memory = PackedCorpus.from_items(documents.items())

    assert len(sent) < 400 and b"plain" not in sent
    assert dict(pickle.loads(sent)) == documents and isinstance(pickle.loads(sent)._buffer, TextsFile)
    assert dict(pickle.loads(pickle.dumps(in_memory))) == documents


def test_a_changed_file_is_read_again(tmp_path, cache, reads):
    folder = written(tmp_path / "beir", {"a": "old text", "b": "kept"})
    load_corpus(str(folder))
    written(tmp_path / "beir", {"a": "new text", "b": "kept", "c": "added"})
    stamp = os.stat(folder / "corpus.jsonl")
    os.utime(folder / "corpus.jsonl", ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 10**9))  # past timestamp resolution

    corpus = load_corpus(str(folder))

    assert len(reads) == 2 and len(entries(cache)) == 1
    assert dict(corpus) == {"a": "new text", "b": "kept", "c": "added"}


def test_a_packing_killed_half_way_leaves_nothing_once_the_corpus_is_packed_again(tmp_path, cache):
    """A packing killed before its entry was moved into place leaves its staging folder (the corpus' whole texts);
    the next packing of that entry, which holds its lock, removes it."""
    folder = written(tmp_path / "beir", {"a": "old text"})
    load_corpus(str(folder))
    (entry,) = entries(cache)
    killed = cache / f"{entry}.writing-4242"
    killed.mkdir()
    (killed / "texts.bin").write_bytes(b"half a corpus")
    written(tmp_path / "beir", {"a": "new text"})
    stamp = os.stat(folder / "corpus.jsonl")
    os.utime(folder / "corpus.jsonl", ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 10**9))  # past timestamp resolution

    assert dict(load_corpus(str(folder))) == {"a": "new text"}
    assert entries(cache) == [entry]


def test_a_bad_file_is_refused_and_leaves_nothing_cached(tmp_path, cache, reads):
    folder = tmp_path / "beir"
    written(folder, {"a": "one"})
    (folder / "corpus.jsonl").write_text('{"_id": "a", "text": "one"}\n{"_id": "a", "text": "two"}\n')

    with pytest.raises(InputError, match=r"corpus\.jsonl, line 2: _id 'a' was already used on line 1"):
        load_corpus(str(folder))

    assert entries(cache) == []
    (folder / "corpus.jsonl").write_text('{"_id": "a", "text": "one"}\n{"_id": "b", "text": "two"}\n')
    assert dict(load_corpus(str(folder))) == {"a": "one", "b": "two"}


def test_the_cache_can_be_turned_off(tmp_path, monkeypatch, reads):
    monkeypatch.setenv(CACHE_VARIABLE, "none")
    folder = written(tmp_path / "beir", {"a": "one"})

    load_corpus(str(folder))
    again = load_corpus(str(folder))

    assert corpus_cache_dir() is None and len(reads) == 2
    assert dict(again) == {"a": "one"} and not isinstance(again._buffer, TextsFile)


def test_a_cache_that_cannot_be_written_reads_the_file_with_a_warning(tmp_path, monkeypatch, caplog):
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "not-a-folder"))
    folder = written(tmp_path / "beir", {"a": "one"})

    with caplog.at_level(logging.WARNING):
        corpus = load_corpus(str(folder))

    assert dict(corpus) == {"a": "one"}
    assert "without the corpus cache" in caplog.text and f"{CACHE_VARIABLE}=none" in caplog.text


def test_processes_starting_together_read_the_file_once_and_map_the_same_corpus(tmp_path, cache):
    """Two processes load a corpus that takes about a second to read: one reads and caches it while the other waits
    on the entry's lock, then maps it."""
    documents = {f"d{number}": f"passage {number} about topic {number % 97}" for number in range(150_000)}
    folder = written(tmp_path / "beir", documents)
    program = (
        "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stdout)\n"
        "from training.data.collection import load_corpus\n"
        "from training.data.fingerprint import corpus_fingerprints\n"
        f"print('fingerprint', corpus_fingerprints(load_corpus({str(folder)!r})).identity)\n"
    )
    printed = printed_together(program, **{CACHE_VARIABLE: str(cache)})

    assert printed.count("Packed ") == 1, printed
    fingerprints = {line for line in printed.splitlines() if line.startswith("fingerprint")}
    assert fingerprints == {f"fingerprint {corpus_fingerprints(documents).identity}"}
    assert len(entries(cache)) == 1 and json.loads((cache / entries(cache)[0] / "source.json").read_text())["size"] > 0
