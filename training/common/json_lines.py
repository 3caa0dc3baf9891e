"""JSON-lines input files, read with errors that name the file, the line and what to do."""

import json
from collections.abc import Iterator
from pathlib import Path

from .errors import InputError


def json_lines(
    path: Path, required: tuple[str, ...] = (), hint: str = "", argument: str | None = None
) -> Iterator[tuple[int, dict]]:
    """(line number, record) for every non-blank line, each a JSON object with the `required` fields.

    Errors start with `argument` (the command-line flag that named the file) when given, and end with `hint`
    (what a valid file looks like).
    """
    where = f"{argument} {path}" if argument else str(path)
    if not path.is_file():
        raise InputError(f"{where}: no such file. {hint}".strip())
    with path.open(encoding="utf-8") as handle:
        # Line by line: a corpus file read whole first was held as strings beside what is made of it (721 MB for
        # the scale benchmark's 1M passages).
        for number, line in enumerate(_utf8_lines(handle, where), start=1):
            if not line.strip():
                continue
            yield number, _record(line, number, where, required, hint)


def _utf8_lines(handle, where: str) -> Iterator[str]:
    try:
        yield from handle
    except UnicodeDecodeError as error:
        raise InputError(f"{where}: not UTF-8 text ({error}). Save the file as UTF-8.") from None


def _record(line: str, number: int, where: str, required: tuple[str, ...], hint: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise InputError(
            f"{where}, line {number}: not valid JSON ({error.msg}). Fix or remove the line. {hint}".strip()
        ) from None
    missing = [name for name in required if not isinstance(record, dict) or name not in record]
    if missing:
        raise InputError(
            f"{where}, line {number}: the record has no {', '.join(repr(name) for name in missing)} field. {hint}".strip()
        )
    return record
