"""A corpus held as one UTF-8 buffer: document id -> text, read like a dict, at about the size of its text.

As a dict of Python strings a corpus costs about three times its text on every process that loads it (2.1 GB for the
scale benchmark's 1M passages, a 721 MB `corpus.jsonl`; about 19 GB at MS MARCO's 8.8M passages), and under
`accelerate launch` every process loads it. Packed, it costs its UTF-8 bytes, 8 bytes of offset a text and its ids;
a text is decoded when it is read, and `text_chunks` hands a whole corpus to an encoder or a tokeniser a slice at a
time, so that no copy of every text as a string is made beside it.

Saved and opened again (the corpus cache), nothing of it is the process's own: its texts are read from their file by
byte range, through the operating system's page cache, which every process of a machine that opens the same folder
shares; its ids and the index that finds an id's row are memory-mapped. Mapped, the texts a process had read stayed
resident in it: all of them once a corpus was indexed or its training pairs scored (0.7 GB at 1M passages).
"""

import hashlib
import mmap
import os
import weakref
from array import array
from collections.abc import ItemsView, Iterator, Mapping, Sequence, ValuesView
from pathlib import Path

import numpy as np

# Texts decoded at once where a whole corpus is encoded or tokenised: about 190 MB of strings at 700 characters a
# passage, and every corpus of the suite and of SciFact's size in one piece, so that each is encoded as one list.
TEXT_CHUNK = 262_144
# Texts decoded at once where every text is read once, in order, by this module (a fingerprint, a teacher's hashes):
# 262,144 at a time peaked 0.6 GB above the corpus at 1M passages, this many about 1/8 of that.
READ_CHUNK = 32_768
# The files of a saved corpus (`PackedCorpus.save`, `PackedCorpus.open`).
TEXTS_FILE, OFFSETS_FILE, IDS_FILE, ID_OFFSETS_FILE = "texts.bin", "offsets.npy", "ids.bin", "id_offsets.npy"
ID_HASHES_FILE, ID_HASH_ROWS_FILE = "id_hashes.npy", "id_hash_rows.npy"
# Strings decoded at once where every one is read in order (a saved corpus' ids, iterated).
ID_CHUNK = 65_536


def id_hash(identifier: bytes) -> int:
    """A 64-bit hash of an id's UTF-8 bytes that is the same in every process (Python's `hash` of a string is
    salted per process, and the index that uses it is saved)."""
    return int.from_bytes(hashlib.blake2b(identifier, digest_size=8).digest(), "little", signed=True)


class PackedStrings(Sequence):
    """Strings in row order, from one UTF-8 buffer (bytes, a memory map, or a `TextsFile`) and their offsets: a
    corpus' texts, or a saved corpus' ids. A string is decoded when it is read."""

    def __init__(self, buffer, offsets: np.ndarray):
        self._buffer = buffer
        self._offsets = offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, row):
        if isinstance(row, slice):
            return [self[each] for each in range(*row.indices(len(self)))]
        row = int(row)
        if not -len(self) <= row < len(self):
            raise IndexError(f"row {row} of {len(self)} strings")
        row %= len(self)
        return self._buffer[int(self._offsets[row]) : int(self._offsets[row + 1])].decode()

    def span(self, start: int = 0, end: int | None = None) -> list[str]:
        """The strings of rows start to end (excluded), decoded; from a file, their byte range is read in one call."""
        end = len(self) if end is None else min(end, len(self))
        offsets = self._offsets[start : end + 1].tolist()
        if len(offsets) < 2:
            return []
        if isinstance(self._buffer, TextsFile):
            buffer, base = self._buffer[offsets[0] : offsets[-1]], offsets[0]
        else:  # sliced where it lies: a copy of the whole range would hold it twice
            buffer, base = self._buffer, 0
        return [buffer[offsets[i] - base : offsets[i + 1] - base].decode() for i in range(len(offsets) - 1)]

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), ID_CHUNK):
            yield from self.span(start, start + ID_CHUNK)


class HashedRows:
    """A saved corpus' id -> row: the ids' hashes sorted in one array beside their rows, an id found by binary search
    and checked against the ids themselves, so that ids whose hashes collide are told apart. 16 bytes an id, mapped,
    where a dict took about 100 bytes an id on every process (0.5 GB at 1M passages)."""

    def __init__(self, ids: PackedStrings, hashes: np.ndarray, rows: np.ndarray):
        self._ids, self._hashes, self._rows = ids, hashes, rows

    @staticmethod
    def sorted_hashes(ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The (sorted hashes, their rows) of `ids`, as `HashedRows` and `PackedCorpus.save` keep them."""
        hashes = np.fromiter((id_hash(identifier.encode()) for identifier in ids), dtype=np.int64, count=len(ids))
        return HashedRows.sorted(hashes)

    @staticmethod
    def sorted(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(`hashes` sorted, the row of each) for ids whose hashes `hashes` are, in row order."""
        rows = np.argsort(hashes, kind="stable")
        return hashes[rows], rows

    def get(self, identifier, default=None):
        if not isinstance(identifier, str):
            return default
        key = id_hash(identifier.encode())
        first, end = np.searchsorted(self._hashes, key, "left"), np.searchsorted(self._hashes, key, "right")
        for row in self._rows[first:end].tolist():
            if self._ids[row] == identifier:
                return row
        return default

    def __getitem__(self, identifier: str) -> int:
        row = self.get(identifier)
        if row is None:
            raise KeyError(identifier)
        return row

    def __contains__(self, identifier) -> bool:
        return self.get(identifier) is not None

    def __len__(self) -> int:
        return len(self._rows)


class PackedCorpus(Mapping):
    """Document id -> text, read-only, in the order the texts were added. `text_at(row)` and `texts(start, end)`
    read by position, the order the retrievers index in."""

    def __init__(self, ids: Sequence[str], buffer: "bytes | bytearray | TextsFile", offsets: np.ndarray, rows=None):
        if len(offsets) != len(ids) + 1:
            raise ValueError(f"{len(ids)} ids need {len(ids) + 1} offsets, not {len(offsets)}")
        self._ids = ids
        # id -> row: a dict, or a saved corpus' `HashedRows`
        self._rows = {identifier: row for row, identifier in enumerate(ids)} if rows is None else rows
        if len(self._rows) != len(ids):
            raise ValueError("document ids must be distinct")
        self._buffer = buffer
        self._offsets = offsets
        self._texts = PackedStrings(buffer, offsets)
        self._folder: Path | None = None  # where the texts are mapped from, for a corpus `open` made

    @classmethod
    def from_items(cls, items) -> "PackedCorpus":
        """A packed corpus of (id, text) pairs, e.g. a dict's items()."""
        builder = PackedCorpusBuilder()
        for identifier, text in items:
            if not builder.add(identifier, text):
                raise ValueError(f"document id {identifier!r} was given twice")
        return builder.build()

    def __getitem__(self, identifier: str) -> str:
        return self.text_at(self._rows[identifier])

    def __contains__(self, identifier) -> bool:
        return identifier in self._rows

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def items(self) -> ItemsView:
        return _ItemsInRowOrder(self)

    def values(self) -> ValuesView:
        return _ValuesInRowOrder(self)

    def __repr__(self) -> str:
        return f"PackedCorpus({len(self)} documents, {len(self._buffer):,} bytes of text)"

    @property
    def ids(self) -> Sequence[str]:
        """The ids in row order, read by position: the row a retriever's index gives maps to its id here."""
        return self._ids

    @property
    def rows(self):
        """id -> row, read like a dict (`rows[id]`, `id in rows`, `rows.get(id)`)."""
        return self._rows

    def text_at(self, row: int) -> str:
        return self._texts[row]

    def texts(self, start: int = 0, end: int | None = None) -> list[str]:
        """The texts of rows start to end (excluded), decoded (an opened corpus reads their range in one call)."""
        return self._texts.span(start, end)

    @property
    def text_bytes(self) -> int:
        return len(self._buffer)

    def save(self, folder: Path) -> None:
        """Write the corpus to `folder` (which must exist) in the files `open` maps: its texts' bytes and offsets,
        its ids packed the same way, and the sorted hashes that find an id's row."""
        if isinstance(self._buffer, TextsFile):
            self._buffer.copy_to(folder / TEXTS_FILE)
        else:
            (folder / TEXTS_FILE).write_bytes(self._buffer)
        np.save(folder / OFFSETS_FILE, np.asarray(self._offsets, dtype=np.int64))
        with open(folder / IDS_FILE, "wb") as ids_file:
            id_offsets = np.zeros(len(self) + 1, dtype=np.int64)
            for row, identifier in enumerate(self._ids):
                id_offsets[row + 1] = id_offsets[row] + ids_file.write(identifier.encode())
        np.save(folder / ID_OFFSETS_FILE, id_offsets)
        hashes, rows = HashedRows.sorted_hashes(self._ids)
        np.save(folder / ID_HASHES_FILE, hashes)
        np.save(folder / ID_HASH_ROWS_FILE, rows)

    @classmethod
    def open(cls, folder: Path) -> "PackedCorpus":
        """A corpus `save` wrote, opened in place: its texts are read from their file as they are asked for, its
        ids, offsets and id index memory-mapped; all of it from the operating system's page cache, one copy shared by
        every process that opens the same files."""
        ids = PackedStrings(_mapped_bytes(folder / IDS_FILE), np.load(folder / ID_OFFSETS_FILE, mmap_mode="r"))
        hashes, hash_rows = (np.load(folder / name, mmap_mode="r") for name in (ID_HASHES_FILE, ID_HASH_ROWS_FILE))
        rows = HashedRows(ids, hashes, hash_rows)
        corpus = cls(ids, TextsFile(folder / TEXTS_FILE), np.load(folder / OFFSETS_FILE, mmap_mode="r"), rows)
        corpus._folder = folder
        return corpus

    def __reduce__(self):
        """A mapped corpus is pickled as its folder (a map cannot be pickled, and another process maps the same
        files); one in memory as its ids, texts and offsets."""
        if self._folder is not None:
            return PackedCorpus.open, (self._folder,)
        return PackedCorpus, (self._ids, bytes(self._buffer), np.asarray(self._offsets))


class _ItemsInRowOrder(ItemsView):
    """(id, text) in row order, the texts read a chunk at a time: a Mapping's own view looks every id up again."""

    def __iter__(self):
        return zip(iter(self._mapping.ids), _ValuesInRowOrder(self._mapping))


class _ValuesInRowOrder(ValuesView):
    def __iter__(self):
        for texts in text_chunks(self._mapping, READ_CHUNK):
            yield from texts


class TextsFile:
    """A saved corpus' texts, read by byte range (`texts_file[start:end]`) from the file, which stays open (a
    replaced cache entry is still read whole from the file the corpus opened). A text read from a memory map stayed
    resident in the process that read it; read from the file, it is the page cache's, which every process shares."""

    def __init__(self, path: Path):
        self._descriptor = os.open(path, os.O_RDONLY)
        weakref.finalize(self, os.close, self._descriptor)
        self._size = os.fstat(self._descriptor).st_size

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, span: slice) -> bytes:
        start, end = int(span.start), int(span.stop)
        pieces = []
        while start < end:  # one read returns at most about 2 GB
            piece = os.pread(self._descriptor, end - start, start)
            if not piece:
                raise EOFError(f"the corpus' texts file ends at byte {start} of {end}: it was truncated")
            pieces.append(piece)
            start += len(piece)
        return b"".join(pieces) if len(pieces) != 1 else pieces[0]

    def copy_to(self, path: Path) -> None:
        with open(path, "wb") as copy:
            for start in range(0, self._size, 2**26):
                copy.write(self[start : min(start + 2**26, self._size)])


def _mapped_bytes(path: Path):
    """The file's bytes, memory-mapped read-only; an empty file (the ids of no documents) as b"", which mmap cannot
    map."""
    with open(path, "rb") as file:
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) if file.seek(0, 2) else b""


class PackedCorpusBuilder:
    """Collects (id, text) pairs, as a corpus file is read, into a `PackedCorpus`."""

    def __init__(self):
        self._ids: list[str] = []
        self._rows: dict[str, int] = {}
        # One growing buffer, kept as the corpus' own: joining a list of encoded texts at the end held them twice.
        self._buffer = bytearray()
        self._offsets = array("q", [0])

    def add(self, identifier: str, text: str) -> bool:
        """Add a document; False (and nothing added) when its id was already added."""
        if identifier in self._rows:
            return False
        self._rows[identifier] = len(self._ids)
        self._ids.append(identifier)
        self._buffer += text.encode()
        self._offsets.append(len(self._buffer))
        return True

    def build(self) -> PackedCorpus:
        """The corpus, which takes over what was collected: the builder starts empty again."""
        corpus = PackedCorpus(self._ids, self._buffer, np.frombuffer(self._offsets, dtype=np.int64), self._rows)
        self.__init__()
        return corpus


class PackedCorpusWriter:
    """Writes (id, text) pairs, as they are made, straight into the files `PackedCorpus.open` maps, in a folder that
    must exist: 24 bytes an id are held until `close` (offsets and hash), where a builder held every text and id (about
    3 GB of ids and row dict alone at 8.8M)."""

    def __init__(self, folder: Path):
        self._folder = folder
        self._texts = open(folder / TEXTS_FILE, "wb")
        self._ids = open(folder / IDS_FILE, "wb")
        self._offsets, self._id_offsets, self._hashes = array("q", [0]), array("q", [0]), array("q")

    def add(self, identifier: str, text: str) -> None:
        encoded = identifier.encode()
        self._offsets.append(self._offsets[-1] + self._texts.write(text.encode()))
        self._id_offsets.append(self._id_offsets[-1] + self._ids.write(encoded))
        self._hashes.append(id_hash(encoded))

    def close(self) -> None:
        """Finish the files; a ValueError where an id was added twice (the folder then holds no corpus to open)."""
        self._texts.close()
        self._ids.close()
        id_offsets = np.frombuffer(self._id_offsets, dtype=np.int64)
        hashes, rows = HashedRows.sorted(np.frombuffer(self._hashes, dtype=np.int64))
        ids = PackedStrings(_mapped_bytes(self._folder / IDS_FILE), id_offsets)
        for position in np.flatnonzero(hashes[1:] == hashes[:-1]).tolist():
            if ids[rows[position]] == ids[rows[position + 1]]:
                raise ValueError(f"document id {ids[rows[position]]!r} was given twice")
        np.save(self._folder / OFFSETS_FILE, np.frombuffer(self._offsets, dtype=np.int64))
        np.save(self._folder / ID_OFFSETS_FILE, id_offsets)
        np.save(self._folder / ID_HASHES_FILE, hashes)
        np.save(self._folder / ID_HASH_ROWS_FILE, rows)


def text_chunks(corpus: Mapping, size: int | None = None) -> Iterator[list[str]]:
    """The corpus' texts in order, `size` (default TEXT_CHUNK) at a time; a packed corpus decodes one chunk at a
    time."""
    size = size or TEXT_CHUNK
    if isinstance(corpus, PackedCorpus):
        for start in range(0, len(corpus), size):
            yield corpus.texts(start, start + size)
        return
    texts = list(corpus.values())  # a dict already holds its strings: the list refers to them
    for start in range(0, len(texts), size):
        yield texts[start : start + size]


def packed(corpus: Mapping) -> PackedCorpus:
    """`corpus` as a packed corpus: itself when it is one."""
    return corpus if isinstance(corpus, PackedCorpus) else PackedCorpus.from_items(corpus.items())


class RowsByText:
    """The row of each of a corpus' texts (the last, where a text repeats), for a teacher handed texts rather than
    ids. A text is found by its hash in one sorted array and checked against the corpus, so texts whose hashes
    collide are told apart: 16 bytes a text, where a dict of hashes took about 100 and a dict keyed by the texts held
    a second copy of every text."""

    def __init__(self, corpus: Mapping):
        self._corpus = packed(corpus)
        hashes = np.empty(len(self._corpus), dtype=np.int64)
        start = 0
        for texts in text_chunks(self._corpus, READ_CHUNK):
            hashes[start : start + len(texts)] = np.fromiter(map(hash, texts), dtype=np.int64, count=len(texts))
            start += len(texts)
        self._rows = np.argsort(hashes, kind="stable")  # rows ascending among equal hashes
        self._hashes = hashes[self._rows]

    def __getitem__(self, text: str) -> int:
        key = hash(text)
        first, end = np.searchsorted(self._hashes, key, "left"), np.searchsorted(self._hashes, key, "right")
        for row in self._rows[first:end][::-1].tolist():  # the last row first
            if self._corpus.text_at(row) == text:
                return row
        raise KeyError(text)
