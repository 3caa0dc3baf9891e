"""The scale benchmark's synthetic collections: N distinct passages of real sentences, each query one sentence of the
passage judged relevant to it, the same for the same seed; the log-log slope it reports; and a work folder that holds
only results measured with one set of settings."""

import json

import pytest

from benchmarks.scale import check_work_dir, slope
from benchmarks.synthetic_collection import sentence_pool, write_collection
from training.data.collection import load_collection


@pytest.fixture(scope="module")
def collection(shared_data_dir, tmp_path_factory):
    pool = sentence_pool(shared_data_dir)
    return write_collection(tmp_path_factory.mktemp("scale") / "collection-300", 300, 40, pool), pool


def test_every_query_is_a_sentence_of_the_passage_judged_relevant_to_it(collection):
    folder, pool = collection
    loaded = load_collection(str(folder), "test")
    texts = [json.loads(line)["text"] for line in (folder / "corpus.jsonl").read_text().splitlines()]

    assert len(loaded.corpus) == 300 and len(set(texts)) == 300  # distinct ids and varied texts
    assert len(loaded.queries) == 40
    for query_id, query in loaded.queries.items():
        [(passage_id, relevance)] = loaded.qrels[query_id].items()
        assert relevance == 1 and query in pool and loaded.corpus[passage_id].startswith(query)


def test_the_same_seed_writes_the_same_collection(collection, tmp_path):
    folder, pool = collection
    again = write_collection(tmp_path / "again", 300, 40, pool)

    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        assert (again / name).read_bytes() == (folder / name).read_bytes()
    assert not (tmp_path / "again.incomplete").exists()


def test_slope_is_the_growth_exponent_between_two_sizes():
    assert slope((10, 2.0), (1000, 200.0)) == pytest.approx(1.0)
    assert slope((10, 2.0), (1000, 2.0)) == pytest.approx(0.0)
    assert slope((10, 0.0), (1000, 2.0)) is None


def test_a_work_folder_measured_at_another_encoded_length_is_refused_before_any_work(tmp_path):
    settings = {"queries": 10_000, "encoder": "/models/splade-tiny", "encoded_length": 128, "max_encoded": 100_000}
    check_work_dir(tmp_path / "work", settings)
    check_work_dir(tmp_path / "work", settings)  # the same settings resume it
    (tmp_path / "work" / "scale.json").write_text("{}")

    with pytest.raises(SystemExit) as refused:
        check_work_dir(tmp_path / "work", {**settings, "encoded_length": 64})

    assert "--encoded_length 128 there, 64 now" in str(refused.value) and "another --work_dir" in str(refused.value)
    assert json.loads((tmp_path / "work" / "settings.json").read_text()) == settings
