"""Raw text corpora (for pretraining, and for unsupervised fine-tuning pairs): validate the user's files and
load them with `datasets` as one text column.

Accepted inputs: plain text (one passage per line), JSON lines (`--text_column`; a BEIR
`corpus.jsonl` has its `title` and `text` joined), parquet, and folders written by
`Dataset.save_to_disk`. With none of them, a small English corpus that ships with every Python
installation (CPython's pydoc topics) is used, so the default run needs no download.
"""

import json
import re
from collections.abc import Iterator
from pathlib import Path

from datasets import Dataset, DatasetDict, IterableDataset, concatenate_datasets, load_dataset, load_from_disk

from ..common.errors import InputError

TEXT_SUFFIXES = {".txt", ".text", ".tsv"}
JSON_SUFFIXES = {".json", ".jsonl"}
PARQUET_SUFFIXES = {".parquet"}
BEIR_TITLE_COLUMN = "title"
# Streaming corpora may be far larger than memory: their files are checked this far only.
STREAMING_CHECK_BYTES = 16 * 2**20


def embedded_corpus_passages(min_words: int = 8) -> list[str]:
    """Paragraphs of the Python reference documentation bundled with CPython (`pydoc_data`)."""
    from pydoc_data.topics import topics

    passages = []
    for topic_text in topics.values():
        for paragraph in re.split(r"\n\s*\n", topic_text):
            passage = " ".join(paragraph.split())
            if len(passage.split()) >= min_words:
                passages.append(passage)
    return list(dict.fromkeys(passages))


def file_format(path: Path, argument: str = "--train_file") -> str:
    suffixes = {s.lower() for s in path.suffixes}
    if suffixes & PARQUET_SUFFIXES:
        return "parquet"
    if suffixes & JSON_SUFFIXES:
        return "json"
    if suffixes & TEXT_SUFFIXES or not path.suffix:
        return "text"
    raise InputError(
        f"{argument} {path}: unknown file type {path.suffix!r}. Use plain text (.txt, one passage per line), "
        "JSON lines (.jsonl/.json) or parquet (.parquet), or pass a folder written by Dataset.save_to_disk "
        "with --dataset_dir."
    )


def _lines(path: Path, limit_bytes: int | None, argument: str) -> Iterator[tuple[int, str]]:
    """(line number, decoded line), failing with the line and byte offset of any non-UTF-8 byte."""
    read = 0
    with path.open("rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            try:
                yield line_number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise InputError(
                    f"{argument} {path}, line {line_number}: byte 0x{raw[error.start]:02x} at column "
                    f"{error.start + 1} is not valid UTF-8. Re-encode the file as UTF-8 (for example "
                    f"`iconv -f latin1 -t utf-8 {path} > fixed.txt`) and pass the fixed file."
                ) from None
            read += len(raw)
            if limit_bytes is not None and read >= limit_bytes:
                return


def check_text_file(path: Path, limit_bytes: int | None = None, argument: str = "--train_file") -> None:
    # Read every line (no early exit at the first passage): a bad byte anywhere must be reported here.
    has_text = False
    for _, line in _lines(path, limit_bytes, argument):
        has_text = has_text or bool(line.strip())
    if not has_text:
        raise InputError(
            f"{argument} {path}: every line is blank, so there is no text to train on. "
            "Put one passage per line."
        )


def check_json_lines_file(
    path: Path, text_column: str, limit_bytes: int | None = None, argument: str = "--train_file"
) -> None:
    found_record = False
    for line_number, line in _lines(path, limit_bytes, argument):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(
                f"{argument} {path}, line {line_number}: not valid JSON ({error.msg}). "
                "Each line must be one JSON object."
            ) from None
        if not isinstance(record, dict) or text_column not in record:
            fields = ", ".join(record) if isinstance(record, dict) else type(record).__name__
            raise InputError(
                f"{argument} {path}, line {line_number}: no {text_column!r} field (it has: {fields}). "
                f"Pass --text_column with the field that holds the text."
            )
        found_record = True
    if not found_record:
        raise InputError(f"{argument} {path}: every line is blank; expected one JSON object per line.")


def existing_file(name: str, argument: str = "--train_file") -> Path:
    """`name` as a path, refused unless it is a file with something in it."""
    path = Path(name)
    if not path.is_file():
        what = "is a folder; pass a folder saved with Dataset.save_to_disk as --dataset_dir" if path.is_dir() else "does not exist"
        raise InputError(f"{argument} {path}: {what}.")
    if path.stat().st_size == 0:
        raise InputError(f"{argument} {path}: the file is empty (0 bytes).")
    return path


def check_train_files(
    train_files: list[str], text_column: str, streaming: bool = False, argument: str = "--train_file"
) -> list[Path]:
    """Fail fast, before any output is written, on files that cannot be pre-trained on."""
    limit = STREAMING_CHECK_BYTES if streaming else None
    paths = []
    for name in train_files:
        path = existing_file(name, argument)
        kind = file_format(path, argument)
        if kind == "text":
            check_text_file(path, limit, argument)
        elif kind == "json":
            check_json_lines_file(path, text_column, limit, argument)
        paths.append(path)
    return paths


def _join_title(record: dict, text_column: str) -> dict:
    title = record.get(BEIR_TITLE_COLUMN) or ""
    return {text_column: f"{title} {record[text_column]}".strip() if title else record[text_column]}


def _load_files(kind: str, files: list[str], text_column: str, streaming: bool, cache_dir: str | None):
    """Files of one format as a dataset with the single column `text_column`."""
    loader_kwargs = {"sample_by": "line"} if kind == "text" else {}
    dataset = load_dataset(
        kind, data_files={"train": files}, split="train", streaming=streaming, cache_dir=cache_dir, **loader_kwargs
    )
    if kind == "text" and text_column != "text":
        dataset = dataset.rename_column("text", text_column)
    # A streamed JSON dataset knows its columns only once read (column_names is None): its records may have titles.
    columns = dataset.column_names
    if text_column != BEIR_TITLE_COLUMN and (columns is None or BEIR_TITLE_COLUMN in columns):
        dataset = dataset.map(_join_title, fn_kwargs={"text_column": text_column})
    return dataset.select_columns([text_column])


def load_raw_corpus(
    train_files: list[str] | None,
    dataset_dir: str | None,
    text_column: str,
    streaming: bool = False,
    cache_dir: str | None = None,
    argument: str = "--train_file",
    check: bool = True,
) -> Dataset | IterableDataset:
    """One dataset with a single text column named `text_column`, blank passages removed. `argument` is the flag
    that named `train_files`, for error messages; `check=False` skips reading the files through in Python first
    (`check_train_files`), where another process has already checked them."""
    if dataset_dir is not None:
        if not Path(dataset_dir).is_dir():
            raise InputError(f"--dataset_dir {dataset_dir}: no such folder.")
        try:
            dataset = load_from_disk(dataset_dir)
        except FileNotFoundError as error:
            raise InputError(
                f"--dataset_dir {dataset_dir}: not a folder written by Dataset.save_to_disk ({error})."
            ) from None
        if isinstance(dataset, DatasetDict):
            if "train" not in dataset:
                raise InputError(
                    f"--dataset_dir {dataset_dir}: holds splits {list(dataset)} but no 'train' split."
                )
            dataset = dataset["train"]
        if text_column not in dataset.column_names:
            raise InputError(
                f"--dataset_dir {dataset_dir}: no {text_column!r} column (it has: {', '.join(dataset.column_names)}). "
                "Pass --text_column with the column that holds the text."
            )
        dataset = dataset.select_columns([text_column])
        if streaming:
            dataset = dataset.to_iterable_dataset()
    elif train_files:
        paths = check_train_files(train_files, text_column, streaming, argument) if check else map(Path, train_files)
        files_by_format = {}
        for path in paths:
            files_by_format.setdefault(file_format(path), []).append(str(path))
        parts = [
            _load_files(kind, files, text_column, streaming, cache_dir) for kind, files in files_by_format.items()
        ]
        dataset = parts[0] if len(parts) == 1 else concatenate_datasets(parts)
    else:
        dataset = Dataset.from_dict({text_column: embedded_corpus_passages()})
        if streaming:
            dataset = dataset.to_iterable_dataset()

    dataset = dataset.filter(lambda record: bool(record[text_column] and record[text_column].strip()))
    if not streaming and len(dataset) == 0:
        raise InputError(
            f"The corpus ({dataset_dir or ', '.join(train_files or [])}) holds no non-blank text in column {text_column!r}."
        )
    return dataset


def shared_out_by_example(stream: IterableDataset, processes: int) -> IterableDataset:
    """`stream` as `processes` shards, shard i holding its examples i, i + processes, i + 2 x processes, ...

    accelerate shares a datasets stream out by shard (file) only when it has at least one per process; a stream of
    fewer files is read whole by every process, which processes (tokenises) every example and keeps 1/N of them. With
    one shard per process, each process still reads the whole stream but keeps, and processes, only its own examples.
    Iterated unsharded, it gives every example once, shard by shard."""

    def examples(shards: list[int]):  # datasets gives each shard of a list-valued argument its part of the list
        for position, record in enumerate(stream):
            if position % processes in shards:
                yield record

    return IterableDataset.from_generator(
        examples, gen_kwargs={"shards": list(range(processes))}, features=stream.features
    )
