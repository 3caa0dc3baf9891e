"""Bad input to `training/pretrain.py` is one clear paragraph on stderr and exit status 2, before any output.

Each message names the input (file and line, argument, folder), says what is wrong and what to do.
No traceback is printed, and nothing that a loader would take for a finished model is written.
"""

import json

import pytest

from pretrain_helpers import TINY_MODEL, TINY_RUN, looks_finished, pretrain, run_script, write_lines
from training.pretraining.tokenizer import train_wordpiece_tokenizer

NARROWER_MODEL = TINY_MODEL.replace("hidden_size=64", "hidden_size=32")


@pytest.fixture
def real_lines(pretrain_lines):
    return pretrain_lines(40)


def error_of(capsys, argv) -> str:
    """The one-paragraph message of a run that must fail on its input (status 2)."""
    status = pretrain(argv)
    err = capsys.readouterr().err
    assert status == 2, err[-2000:]
    message = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(message) == 1, err[-2000:]
    assert "Traceback" not in err
    return message[0]


def test_missing_train_file_names_the_file_and_exits_2(tmp_path):
    missing = tmp_path / "no-such-corpus.txt"
    out = tmp_path / "out"

    result = run_script(["--train_file", missing, "--output_dir", out, *TINY_RUN])

    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"error: --train_file {missing}: does not exist."
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_empty_train_file_is_reported_as_empty(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    out = tmp_path / "out"

    message = error_of(capsys, ["--train_file", empty, "--output_dir", out, *TINY_RUN])

    assert message == f"error: --train_file {empty}: the file is empty (0 bytes)."
    assert not out.exists()


def test_file_of_blank_lines_says_there_is_no_text(tmp_path, capsys):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n   \n\t\n\n", encoding="utf-8")
    out = tmp_path / "out"

    message = error_of(capsys, ["--train_file", blank, "--output_dir", out, *TINY_RUN])

    assert message.startswith(f"error: --train_file {blank}: every line is blank")
    assert "one passage per line" in message
    assert not out.exists()


def test_non_utf8_byte_is_located_by_line_and_column(tmp_path, capsys, real_lines):
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(
        real_lines[0].encode() + b"\n" + real_lines[1].encode() + b"\n" + b"caf\xe9 au lait\n" + real_lines[2].encode()
    )
    out = tmp_path / "out"

    message = error_of(capsys, ["--train_file", latin1, "--output_dir", out, *TINY_RUN])

    assert message.startswith(f"error: --train_file {latin1}, line 3: byte 0xe9 at column 4 is not valid UTF-8.")
    assert "Re-encode the file as UTF-8" in message
    assert not out.exists()


def test_json_line_without_the_text_field_names_line_field_and_text_column(tmp_path, capsys, real_lines):
    corpus = write_lines(
        tmp_path / "corpus.jsonl",
        [json.dumps({"text": real_lines[0]}), json.dumps({"_id": "7", "body": real_lines[1]})],
    )
    out = tmp_path / "out"

    message = error_of(capsys, ["--train_file", corpus, "--output_dir", out, *TINY_RUN])

    assert message.startswith(f"error: --train_file {corpus}, line 2: no 'text' field (it has: _id, body).")
    assert "--text_column" in message
    assert not out.exists()


def test_invalid_json_line_is_named(tmp_path, capsys, real_lines):
    corpus = write_lines(
        tmp_path / "corpus.jsonl",
        [json.dumps({"text": real_lines[0]}), json.dumps({"text": real_lines[1]}), '{"text": "unterminated'],
    )
    out = tmp_path / "out"

    message = error_of(capsys, ["--train_file", corpus, "--output_dir", out, *TINY_RUN])

    assert message.startswith(f"error: --train_file {corpus}, line 3: not valid JSON (")
    assert "Each line must be one JSON object." in message
    assert not out.exists()


def test_max_seq_length_beyond_position_embeddings_suggests_both_fixes(tmp_path, capsys):
    out = tmp_path / "out"

    message = error_of(capsys, ["--max_seq_length", "1024", "--output_dir", out, *TINY_RUN])

    assert message.startswith("error: --max_seq_length 1024 exceeds the model's max_position_embeddings (512).")
    assert "--config_overrides max_position_embeddings=1024" in message
    assert not out.exists()


def test_unknown_config_override_field_is_named(tmp_path, capsys):
    out = tmp_path / "out"

    message = error_of(capsys, ["--output_dir", out, *TINY_RUN, "--config_overrides", "hidden_sise=64"])

    assert message.startswith("error: --config_overrides: 'hidden_sise=64' is not 'field=value'")
    assert not out.exists()


def test_tokenizer_larger_than_vocab_size_gives_both_sizes_and_the_fix(tmp_path, capsys, minilm_dir):
    out = tmp_path / "out"

    message = error_of(
        capsys,
        ["--tokenizer_name", minilm_dir, "--output_dir", out, *TINY_RUN, "--config_overrides", "vocab_size=1000"],
    )

    assert message.startswith(
        f"error: The tokenizer from --tokenizer_name {minilm_dir} has 30522 tokens, "
        "more than the model's vocab_size (1000)"
    )
    assert "--config_overrides vocab_size=30522" in message
    assert not out.exists()


def test_output_dir_of_another_model_is_refused_naming_the_field_unless_overwritten(tmp_path, capsys):
    out = tmp_path / "out"
    first = ["--output_dir", out, *TINY_RUN, "--max_steps", "2", "--save_steps", "2"]
    assert pretrain(first) == 0
    finished_config = (out / "config.json").read_text()
    assert json.loads(finished_config)["hidden_size"] == 64
    narrower = [*first, "--config_overrides", NARROWER_MODEL]

    message = error_of(capsys, narrower)

    assert message.startswith(f"error: --output_dir {out} holds a different model (hidden_size: 64 there, 32 here).")
    assert "--overwrite_output_dir" in message
    assert (out / "config.json").read_text() == finished_config

    assert pretrain([*narrower, "--overwrite_output_dir"]) == 0
    assert json.loads((out / "config.json").read_text())["hidden_size"] == 32
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    assert json.loads((out / "checkpoint-2" / "config.json").read_text())["hidden_size"] == 32


def test_output_dir_holding_unrelated_files_is_left_alone(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("my notes\n")

    message = error_of(capsys, ["--output_dir", out, *TINY_RUN, "--max_steps", "2"])

    assert message.startswith(
        f"error: --output_dir {out}: the folder is not empty (notes.txt) and holds no SEED pretraining run to continue."
    )
    assert "--overwrite_output_dir" in message
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "my notes\n"
    assert not looks_finished(out)


def test_warm_start_from_roberta_is_refused_naming_the_supported_model_types(tmp_path, capsys, save_tiny_encoder):
    roberta = tmp_path / "roberta"
    save_tiny_encoder("roberta", roberta)
    out = tmp_path / "out"

    message = error_of(capsys, ["--model_name_or_path", roberta, "--output_dir", out, *TINY_RUN, "--max_steps", "2"])

    assert message.startswith(
        f"error: --model_name_or_path {roberta}: model_type 'roberta' cannot warm-start a SEED-Encoder: "
        "only BERT checkpoints (model_type 'bert', e.g. all-MiniLM-L6-v2)"
    )
    assert not out.exists()


def test_warm_start_missing_an_encoder_weight_names_it_and_trains_nothing(tmp_path, capsys, real_lines, save_tiny_encoder):
    damaged = tmp_path / "bert"
    save_tiny_encoder("bert", damaged, vocab_size=1000, without="embeddings.position_embeddings.weight")
    train_wordpiece_tokenizer(real_lines, vocab_size=1000, model_max_length=64).save_pretrained(damaged)
    out = tmp_path / "out"

    message = error_of(capsys, [
        "--model_name_or_path", damaged, "--output_dir", out, "--max_seq_length", "32", "--max_steps", "2",
        "--report_to", "none",
    ])

    assert message.startswith(
        f"error: --model_name_or_path {damaged}: 1 encoder weight(s) would start from random values instead of the "
        "checkpoint's: bert.embeddings.position_embeddings.weight (not in the checkpoint)."
    )
    assert not out.exists()
