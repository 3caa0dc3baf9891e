"""Bad input to `training/evaluate.py` is one clear paragraph on stderr and exit status 2, before any work.

Each message names the file and line, the argument or the folder, says what is wrong and what to do. No
traceback is printed and nothing is written: neither --output_json nor --save_runs.
"""

import shutil

import pytest
from transformers import AutoModel, AutoTokenizer

from evaluation_helpers import evaluate, run_script, write_collection
import modeling_seed  # noqa: F401  (registers SEED with the Auto classes)
from training.common.models import load_sparse_encoder

CORPUS = [{"_id": "a", "title": "Aspirin", "text": "lowers fever."}, {"_id": "b", "text": "Ibuprofen too."}]
QUERIES = [{"_id": "q1", "text": "what lowers fever"}, {"_id": "q2", "text": "ibuprofen"}]
JUDGMENTS = {"test": [("q1", "a", 1), ("q2", "b", 1)], "train": [("q1", "b", 1)]}


@pytest.fixture
def collection(tmp_path):
    return write_collection(tmp_path / "collection", CORPUS, QUERIES, JUDGMENTS)


@pytest.fixture
def outputs(tmp_path):
    """Output flags pointing into tmp_path; the test checks nothing appeared there."""
    return ["--output_json", tmp_path / "results.json", "--save_runs", tmp_path / "runs"]


def error_of(capsys, argv, tmp_path) -> str:
    """The one-line message of a run that must fail on its input (status 2), having written nothing."""
    status = evaluate(argv)
    err = capsys.readouterr().err
    assert status == 2, err[-2000:]
    messages = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(messages) == 1, err[-2000:]
    assert "Traceback" not in err
    assert not (tmp_path / "results.json").exists() and not (tmp_path / "runs").exists()
    return messages[0]


def test_missing_layout_file_names_it_and_the_layout(collection, outputs, tmp_path, capsys):
    (collection / "corpus.jsonl").unlink()

    message = error_of(capsys, ["bm25", "--data_dir", collection, *outputs], tmp_path)

    assert message.startswith(f"error: {collection / 'corpus.jsonl'}: no such file.")
    assert "queries.jsonl" in message and "qrels/<split>.tsv" in message


def test_unknown_split_names_the_splits_that_exist(collection, outputs, tmp_path, capsys):
    message = error_of(capsys, ["bm25", "--data_dir", collection, "--split", "dev", *outputs], tmp_path)

    assert message.startswith(f"error: --split dev: {collection / 'qrels' / 'dev.tsv'} does not exist")
    assert "the splits there are: test, train" in message


def test_split_of_only_a_header_is_empty(collection, outputs, tmp_path, capsys):
    (collection / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")

    message = error_of(capsys, ["bm25", "--data_dir", collection, *outputs], tmp_path)

    assert message.startswith("error: --split test:")
    assert "judges no query as having a relevant document" in message
    assert "(test, train)" in message


def test_qrels_with_unknown_ids_reports_how_many_and_where_and_skip_unknown_ids_proceeds(
    collection, outputs, tmp_path, capsys
):
    qrels = collection / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + "q1\tgone\t1\nq-gone\ta\t1\n")

    message = error_of(capsys, ["bm25", "--data_dir", collection, *outputs], tmp_path)

    assert message.startswith(f"error: {qrels}: 2 of 4 judgments point at ids that do not exist")
    assert "line 4: document 'gone' is not in corpus.jsonl; line 5: query 'q-gone' is not in queries.jsonl" in message
    assert "--skip_unknown_ids" in message
    assert evaluate(["bm25", "--data_dir", collection, "--skip_unknown_ids", *outputs]) == 0
    assert (tmp_path / "results.json").is_file()


def test_malformed_json_line_is_located_by_file_and_line(collection, outputs, tmp_path, capsys):
    queries = collection / "queries.jsonl"
    queries.write_text(queries.read_text() + '{"_id": "q3", "text": "unterminated\n')

    message = error_of(capsys, ["bm25", "--data_dir", collection, *outputs], tmp_path)

    assert message.startswith(f"error: {queries}, line 3: not valid JSON")


def test_record_without_an_id_is_located_by_file_and_line(collection, outputs, tmp_path, capsys):
    corpus = collection / "corpus.jsonl"
    corpus.write_text(corpus.read_text() + '{"title": "no id", "text": "x"}\n')

    message = error_of(capsys, ["bm25", "--data_dir", collection, *outputs], tmp_path)

    assert message.startswith(f"error: {corpus}, line 3: the record has no '_id' field.")


def test_relevance_that_is_not_an_integer_is_located_by_line(collection, outputs, tmp_path, capsys):
    qrels = collection / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + "q1\tb\thigh\n")

    message = error_of(capsys, ["bm25", "--data_dir", collection, *outputs], tmp_path)

    assert message.startswith(f"error: {qrels}, line 4: relevance 'high' is not an integer.")


def test_retriever_that_is_neither_bm25_nor_a_folder(collection, outputs, tmp_path, capsys):
    message = error_of(capsys, ["bm25", "no/such/model", "--data_dir", collection, *outputs], tmp_path)

    assert message.startswith("error: retriever 'no/such/model': no/such/model is not a folder.")
    assert "'bm25', a model folder, 'dense:PATH', 'sparse:PATH' or 'hybrid:A+B[+C]'" in message


def test_folder_without_a_model(collection, outputs, tmp_path, capsys):
    empty = tmp_path / "empty-model"
    empty.mkdir()

    message = error_of(capsys, [empty, "--data_dir", collection, *outputs], tmp_path)

    assert message.startswith(f"error: {empty}: holds no model")


def test_folder_with_config_but_no_weights(collection, outputs, tmp_path, capsys, tiny_seed_dir):
    no_weights = tmp_path / "no-weights"
    no_weights.mkdir()
    shutil.copy(tiny_seed_dir / "config.json", no_weights)

    message = error_of(capsys, [no_weights, "--data_dir", collection, *outputs], tmp_path)

    assert message.startswith(f"error: {no_weights}: has a config.json but no weights")


def test_folder_with_unreadable_weights(collection, outputs, tmp_path, capsys, tiny_seed_dir):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_seed_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not safetensors")

    message = error_of(capsys, [broken, "--data_dir", collection, *outputs], tmp_path)

    assert message.startswith(f"error: {broken}: the model in this folder cannot be loaded (")


def test_sparse_search_of_a_model_without_mlm_head(collection, outputs, tmp_path, capsys, minilm_dir):
    message = error_of(capsys, [f"sparse:{minilm_dir}", "--data_dir", collection, *outputs], tmp_path)

    assert message.startswith(f"error: {minilm_dir}: a dense SentenceTransformer model without a masked-LM head")
    assert "asked for sparse retrieval" in message


def test_sparse_search_of_an_encoder_saved_without_its_mlm_head(collection, outputs, tmp_path, capsys, tiny_seed_dir):
    encoder_only = tmp_path / "encoder-only"
    AutoModel.from_pretrained(tiny_seed_dir).save_pretrained(encoder_only)
    AutoTokenizer.from_pretrained(tiny_seed_dir).save_pretrained(encoder_only)

    message = error_of(capsys, [f"sparse:{encoder_only}", "--data_dir", collection, *outputs], tmp_path)

    assert message.startswith(f"error: {encoder_only}: a checkpoint without a masked-LM head (no config.json")


def test_dense_search_of_a_sparse_encoder(collection, outputs, tmp_path, capsys, tiny_seed_dir):
    splade = tmp_path / "splade"
    load_sparse_encoder(str(tiny_seed_dir)).save(str(splade))

    message = error_of(capsys, [f"dense:{splade}", "--data_dir", collection, *outputs], tmp_path)

    assert message.startswith(f"error: {splade}: a SparseEncoder (sparse) model, asked for dense retrieval.")


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--top_k", "100"], "error: --top_k 100: must be at least 1000"),
        (["--bm25_stemmer", "klingon"], "error: --bm25_stemmer klingon: not a PyStemmer algorithm"),
        (["--bm25_stopwords", "xx"], "error: --bm25_stopwords xx: not a stopword list bm25s has"),
        (["--fusion_tune_split", "train"], "error: --fusion_tune_split train: no hybrid: retriever to tune."),
        (["--batch_size", "0"], "error: --batch_size 0: must be at least 1."),
    ],
)
def test_argument_out_of_range_names_the_flag(collection, outputs, tmp_path, capsys, flags, expected):
    message = error_of(capsys, ["bm25", "--data_dir", collection, *flags, *outputs], tmp_path)

    assert message.startswith(expected)


def test_hybrid_of_one_retriever(collection, outputs, tmp_path, capsys):
    message = error_of(capsys, ["hybrid:bm25", "--data_dir", collection, *outputs], tmp_path)

    assert message.startswith("error: retriever 'hybrid:bm25': a hybrid lists two or more retrievers joined by '+'")


def test_output_json_in_a_missing_folder(collection, tmp_path, capsys):
    target = tmp_path / "no-such-folder" / "results.json"

    message = error_of(capsys, ["bm25", "--data_dir", collection, "--output_json", target], tmp_path)

    assert message == f"error: --output_json {target}: its folder does not exist; give a file path in an existing folder."


def test_output_json_that_cannot_be_written_is_refused_before_the_evaluation(collection, tmp_path, capsys):
    target = "/proc/results.json"  # a folder not even root can write in

    message = error_of(capsys, ["bm25", "--data_dir", collection, "--output_json", target], tmp_path)

    assert message.startswith(f"error: --output_json {target}: cannot be written (")
    assert message.endswith("Choose another file.")


def test_save_runs_where_nothing_can_be_written_is_refused_before_the_evaluation(collection, tmp_path, capsys):
    message = error_of(capsys, ["bm25", "--data_dir", collection, "--save_runs", "/proc/runs"], tmp_path)

    assert message.startswith("error: --save_runs /proc/runs: cannot write in /proc (")


def test_queries_that_share_no_word_with_the_corpus_score_zero_with_a_warning(tmp_path, capsys, caplog):
    """Not bad input, but the retriever finds nothing at all: ranx cannot rank an empty run and raised."""
    collection = write_collection(
        tmp_path / "collection", CORPUS, [{"_id": "q1", "text": "zebra"}, {"_id": "q2", "text": "quasar"}], JUDGMENTS
    )

    assert evaluate(["bm25", "--data_dir", collection, "--output_json", tmp_path / "results.json"]) == 0

    assert "| `bm25` | 0.000 | 0.000 | 0.000 | 0.000 |" in capsys.readouterr().out
    assert "bm25 found no document for any of the 2 queries" in caplog.text


@pytest.mark.slow
def test_script_prints_one_paragraph_without_traceback_and_exits_2(collection, tmp_path):
    (collection / "qrels" / "test.tsv").unlink()

    result = run_script(["bm25", "--data_dir", collection, "--output_json", tmp_path / "results.json"])

    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"error: --split test: {collection / 'qrels' / 'test.tsv'} does not exist; the splits there are: train."
    )
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "results.json").exists()
