"""The corpus formats the README promises, loaded and streamed as it says: parquet and JSON lines read
from `--text_column` together, a `save_to_disk` folder's `train` split alone, every format streamed as
an `IterableDataset` of the one text column (a BEIR corpus with its titles joined), and a streamed
corpus split between the processes of a run, each reading different passages."""

import json
import subprocess
import sys

import pytest
from datasets import Dataset, DatasetDict, IterableDataset

from pretrain_helpers import REPO_ROOT, TINY_RUN, free_port, pretrain, subprocess_env, write_lines
from training.data.corpus import load_raw_corpus


def card_text(folder) -> str:
    return (folder / "README.md").read_text()


@pytest.fixture(scope="module")
def scifact_records(shared_data_dir) -> list[dict]:
    """The first 64 records of SciFact's BEIR corpus.jsonl: _id, title, text and metadata."""
    with (shared_data_dir / "scifact" / "corpus.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(next(handle)) for _ in range(64)]


def test_parquet_and_json_lines_train_together_from_the_text_column(pretrain_lines, tmp_path):
    lines = pretrain_lines(50)
    parquet = tmp_path / "part.parquet"
    Dataset.from_dict({"body": lines[:30], "source": ["prose"] * 30}).to_parquet(str(parquet))
    records = [{"_id": str(i), "body": line, "meta": {"n": i}} for i, line in enumerate(lines[30:])]
    json_lines = write_lines(tmp_path / "part.jsonl", [json.dumps(record) for record in records])
    out = tmp_path / "out"

    status = pretrain([
        "--train_file", parquet, json_lines, "--text_column", "body", "--output_dir", out, *TINY_RUN, "--max_steps", "2",
    ])

    assert status == 0
    assert "), 50 training sequences of at most 128 tokens" in card_text(out)
    assert "- Data: `part.parquet`, `part.jsonl`" in card_text(out)


def test_dataset_dir_with_several_splits_trains_on_the_train_split_only(pretrain_lines, tmp_path):
    lines = pretrain_lines(88)
    splits = {"train": lines[:48], "validation": lines[48:68], "test": lines[68:]}
    DatasetDict({name: Dataset.from_dict({"text": texts}) for name, texts in splits.items()}).save_to_disk(
        str(tmp_path / "saved")
    )
    out = tmp_path / "out"

    status = pretrain(["--dataset_dir", tmp_path / "saved", "--output_dir", out, *TINY_RUN, "--max_steps", "2"])

    assert status == 0
    assert "- Steps: 2 (0.33 epochs), 48 training sequences" in card_text(out)


@pytest.mark.parametrize("kind", ["text", "beir_jsonl", "parquet"])
def test_streaming_reads_every_format_as_an_iterable_dataset_of_the_text_column(kind, scifact_records, tmp_path):
    records = scifact_records[:12]
    if kind == "text":
        path = write_lines(tmp_path / "corpus.txt", [record["text"] for record in records])
        expected = [record["text"] for record in records]
    elif kind == "beir_jsonl":
        path = write_lines(tmp_path / "corpus.jsonl", [json.dumps(record) for record in records])
        expected = [f"{record['title']} {record['text']}" for record in records]
    else:
        path = tmp_path / "corpus.parquet"
        Dataset.from_dict({"text": [r["text"] for r in records], "_id": [r["_id"] for r in records]}).to_parquet(str(path))
        expected = [record["text"] for record in records]

    dataset = load_raw_corpus([str(path)], None, "text", streaming=True)

    assert isinstance(dataset, IterableDataset)
    assert list(dataset) == [{"text": text} for text in expected]


# Runs the real script in each process, recording the passages (token ids) its collator receives, the texts it
# tokenises into training sequences (the tokenizer called as `tokenize_corpus` calls it) and the files it reads through
# to check them.
RECORDING_SCRIPT = """
import json, os, sys
from pathlib import Path

from transformers import PreTrainedTokenizerFast

import training.data.corpus
from modeling_seed import DataCollatorForSeedPretraining
from training.pretrain import main

received, tokenised, checked = [], [], []
check = training.data.corpus.check_json_lines_file
collate, tokenize = DataCollatorForSeedPretraining.__call__, PreTrainedTokenizerFast.__call__


def recording_collate(self, examples, *args, **kwargs):
    received.extend(list(example["input_ids"]) for example in examples)
    return collate(self, examples, *args, **kwargs)


def recording_tokenize(self, texts, *args, **kwargs):
    if kwargs.get("return_special_tokens_mask"):
        tokenised.extend(texts)
    return tokenize(self, texts, *args, **kwargs)


def recording_check(path, *args, **kwargs):
    checked.append(str(path))
    return check(path, *args, **kwargs)


DataCollatorForSeedPretraining.__call__ = recording_collate
PreTrainedTokenizerFast.__call__ = recording_tokenize
training.data.corpus.check_json_lines_file = recording_check
status = main(sys.argv[2:])
record = {"received": received, "tokenised": tokenised, "checked": checked}
Path(sys.argv[1], f"rank-{os.environ['RANK']}.json").write_text(json.dumps(record))
sys.exit(status)
"""


@pytest.mark.slow
def test_two_processes_streaming_a_beir_corpus_each_train_on_different_passages(scifact_records, tmp_path):
    corpus = write_lines(tmp_path / "corpus.jsonl", [json.dumps(record) for record in scifact_records])
    script = tmp_path / "recording_pretrain.py"
    script.write_text(RECORDING_SCRIPT)
    out = tmp_path / "out"
    flags = ["--train_file", corpus, "--output_dir", out, *TINY_RUN, "--streaming", "--max_steps", "2", "--use_cpu"]

    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
         str(script), str(tmp_path), *map(str, flags)],
        cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    assert "- Batch: 16 sequences per step (2 process(es))" in card_text(out)
    records = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in (0, 1)]
    per_rank = [{tuple(ids) for ids in record["received"]} for record in records]
    tokenised = [record["tokenised"] for record in records]
    # 2 steps of 8 passages each at least (a loader may read one batch ahead), all different.
    assert all(len(passages) >= 16 for passages in per_rank)
    assert not per_rank[0] & per_rank[1]
    # One file is one shard: each process tokenises its own passages of it, not every passage to keep half of them.
    assert all(tokenised) and not set(tokenised[0]) & set(tokenised[1])
    # The file is read through and checked once, by the main process.
    assert [record["checked"] for record in records] == [[str(corpus)], []]
