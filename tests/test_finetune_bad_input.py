"""Bad input to `training/finetune.py` stops the run before anything is written: one paragraph that names the
file, line or argument and what to do, and exit status 2."""

import json
import shutil

import pytest
from finetune_helpers import TINY_FINETUNE, finetune


@pytest.fixture
def out(tmp_path):
    return tmp_path / "never-written"


def refused(capsys, out, argv) -> str:
    """Run with `argv`, check it is refused without writing `out`, and return the error message."""
    assert finetune([*argv, "--output_dir", out, *TINY_FINETUNE]) == 2
    assert not out.exists()
    error = capsys.readouterr().err
    assert error.startswith("error: ") and "Traceback" not in error
    return error


def test_a_collection_without_the_train_split_is_refused(capsys, out, scifact_slice, tiny_seed_dir, tmp_path):
    collection = tmp_path / "no-train"
    shutil.copytree(scifact_slice, collection)
    (collection / "qrels" / "train.tsv").unlink()

    error = refused(capsys, out, ["--model_name_or_path", tiny_seed_dir, "--data_dir", collection])

    assert "train.tsv" in error


def test_qrels_with_unknown_ids_are_refused_unless_skipped(capsys, out, scifact_slice, tiny_seed_dir, tmp_path):
    collection = tmp_path / "unknown-ids"
    shutil.copytree(scifact_slice, collection)
    with (collection / "qrels" / "train.tsv").open("a") as qrels:
        qrels.write("no-such-query\tno-such-document\t1\n")

    error = refused(capsys, out, ["--model_name_or_path", tiny_seed_dir, "--data_dir", collection])

    assert "no-such-query" in error and "--skip_unknown_ids" in error


def test_a_pairs_file_without_query_or_positive_names_the_line(capsys, out, tiny_seed_dir, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        json.dumps({"query": "what is SEED?", "positive": "A pre-training method."}) + "\n"
        + json.dumps({"question": "what is a weak decoder?", "positive": "A shallow one."}) + "\n"
    )

    error = refused(capsys, out, ["--model_name_or_path", tiny_seed_dir, "--train_file", pairs])

    assert f"{pairs}, line 2" in error and "'query'" in error


def test_a_teacher_folder_without_a_model_is_refused(capsys, out, scifact_slice, tiny_seed_dir, tmp_path):
    empty = tmp_path / "empty-teacher"
    empty.mkdir()

    error = refused(capsys, out, [
        "--model_name_or_path", tiny_seed_dir, "--data_dir", scifact_slice, "--negatives", "bm25", "--teacher", empty,
    ])

    assert f"--teacher {empty}" in error


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--negatives", "bm25", "--mining_rounds", "2"], "--mining_rounds"),
        (["--negatives", "none", "--teacher", "bm25"], "--teacher"),
        (["--negatives", "bm25", "--negatives_range_min", "30", "--negatives_range_max", "20"], "--negatives_range_min"),
        (["--train_file", "pairs.jsonl"], "--train_file"),
        (["--corpus_file", "passages.txt"], "--corpus_file"),
        (["--negatives", "bm25", "--mining_index", "ivf"], "--mining_index ivf"),
        (["--sparse", "--mining_index", "ivf"], "--mining_index ivf"),
        (["--mining_index", "hnsw"], "--mining_index hnsw"),
        (["--sparse", "--embedding_dtype", "float16"], "--embedding_dtype float16"),
    ],
)
def test_contradictory_flags_are_refused(capsys, out, scifact_slice, tiny_seed_dir, flags, named):
    error = refused(capsys, out, ["--model_name_or_path", tiny_seed_dir, "--data_dir", scifact_slice, *flags])

    assert named in error


def test_a_path_as_the_cards_base_model_is_refused_asking_for_a_hub_id(capsys, out, scifact_slice, tiny_seed_dir):
    error = refused(capsys, out, [
        "--model_name_or_path", tiny_seed_dir, "--data_dir", scifact_slice, "--base_model", tiny_seed_dir,
    ])

    assert f"--base_model {tiny_seed_dir}" in error and "Hub model id" in error


def test_a_missing_starting_checkpoint_is_refused(capsys, out, scifact_slice, tmp_path):
    error = refused(capsys, out, ["--model_name_or_path", tmp_path / "absent", "--data_dir", scifact_slice])

    assert "no such folder" in error


def test_a_missing_candidate_start_or_the_start_again_as_a_candidate_is_refused(capsys, out, scifact_slice, minilm_dir, tmp_path):
    missing = refused(capsys, out, [
        "--model_name_or_path", minilm_dir, "--candidate_starts", tmp_path / "absent", "--data_dir", scifact_slice,
    ])
    again = refused(capsys, out, [
        "--model_name_or_path", minilm_dir, "--candidate_starts", minilm_dir, "--data_dir", scifact_slice,
    ])

    assert f"--candidate_starts {tmp_path / 'absent'}: no such folder" in missing
    assert f"--candidate_starts {minilm_dir}: that is --model_name_or_path already" in again


def test_sparse_on_a_checkpoint_without_an_mlm_head_is_refused(capsys, out, scifact_slice, minilm_dir):
    error = refused(capsys, out, ["--model_name_or_path", minilm_dir, "--data_dir", scifact_slice, "--sparse"])

    assert "masked-LM head" in error and "SEED pretraining folder" in error


@pytest.mark.parametrize("content, says", [("", "the file is empty"), (None, "does not exist")])
def test_an_empty_or_missing_corpus_file_for_unsupervised_pairs_names_its_flag(capsys, out, tiny_seed_dir, tmp_path, content, says):
    corpus = tmp_path / "passages.txt"
    if content is not None:
        corpus.write_text(content)

    error = refused(capsys, out, ["--model_name_or_path", tiny_seed_dir, "--corpus_file", corpus])

    assert f"--corpus_file {corpus}: {says}" in error


def test_a_list_flag_given_twice_is_refused_rather_than_keeping_only_its_last_values(capsys, out, scifact_slice, minilm_dir):
    error = refused(capsys, out, [
        "--model_name_or_path", minilm_dir, "--corpus_file", scifact_slice / "corpus.jsonl", "--negatives", "bm25",
        "--teacher", "bm25", "--teacher", "start",
    ])

    assert "--teacher is given 2 times" in error and "--teacher A B" in error


@pytest.mark.parametrize("kind", ["sentences", "leads"])
def test_an_unpunctuated_corpus_asked_for_sentences_is_told_why_and_to_use_crops(capsys, out, tiny_seed_dir, tmp_path, kind):
    """Lower-cased text without punctuation (as some corpora are distributed) has no sentence to cut: a larger file
    of the same text would not help, crops would."""
    corpus = tmp_path / "unpunctuated.jsonl"
    words = "dietary fibre intake lowers the risk of colon cancer in adults followed over ten years"
    corpus.write_text("".join(json.dumps({"_id": str(index), "text": f"{words} study {index} {words}"}) + "\n" for index in range(40)))

    argv = ["--model_name_or_path", tiny_seed_dir, "--corpus_file", corpus, "--pseudo_queries", kind, "--output_dir", out]
    assert finetune([*argv, *TINY_FINETUNE]) == 2
    assert not out.exists()
    stderr = capsys.readouterr().err  # the corpus is read (with its progress bar) before it can be judged
    error = stderr.strip().splitlines()[-1]
    assert error.startswith("error: ") and "Traceback" not in stderr
    assert "no passage has a sentence end" in error and "--pseudo_queries crops" in error
    assert "larger --corpus_file" not in error


@pytest.mark.parametrize(
    "flag, value, requirement",
    [("--learning_rate", "-1", "must be above 0"), ("--per_device_train_batch_size", "0", "must be at least 1"),
     ("--adam_beta2", "1.5", "must be in [0, 1)")],
)
def test_a_value_the_optimizer_or_loader_would_reject_is_refused_before_the_start_is_evaluated(
    capsys, out, scifact_slice, minilm_dir, flag, value, requirement
):
    """Found by the Trainer, it came after the start's metrics and examples were written, which then refused the
    corrected rerun as "a different fine-tuning run"."""
    argv = ["--model_name_or_path", minilm_dir, "--data_dir", scifact_slice, "--output_dir", out, *TINY_FINETUNE]
    assert finetune([*argv, flag, value]) == 2  # after TINY_FINETUNE's values, which it overrides

    error = capsys.readouterr().err
    assert not out.exists() and "Traceback" not in error
    assert error.startswith(f"error: {flag} {float(value) if flag != '--per_device_train_batch_size' else value}")
    assert requirement in error


def test_titled_records_whose_texts_are_all_empty_are_told_so(capsys, out, tiny_seed_dir, tmp_path):
    """Records with empty text were dropped without a word, and the run advised a larger corpus or crops."""
    corpus = tmp_path / "titles-only.jsonl"
    corpus.write_text("".join(
        json.dumps({"_id": str(index), "title": f"Protein {index} folds in yeast", "text": ""}) + "\n" for index in range(30)
    ))

    error = refused(capsys, out, ["--model_name_or_path", tiny_seed_dir, "--corpus_file", corpus, "--pseudo_queries", "titles"])

    assert f"--corpus_file {corpus}: every record's 'text' is empty (30 records)" in error
    assert "--text_column" in error and "crops" not in error and "larger" not in error
