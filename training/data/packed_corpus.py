"""A corpus held as one UTF-8 buffer: document id -> text, read like a dict, at about the size of its text.

As a dict of Python strings a corpus costs about three times its text on every process that loads it (2.1 GB for the
scale benchmark's 1M passages, a 721 MB `corpus.jsonl`; about 19 GB at MS MARCO's 8.8M passages), and under
`accelerate launch` every process loads it. Packed, it costs its UTF-8 bytes, 8 bytes of offset a text and its ids;
a text is decoded when it is read, and `text_chunks` hands a whole corpus to an encoder or a tokeniser a slice at a
time, so that no copy of every text as a string is made beside it.
"""

import mmap
from array import array
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

# Texts decoded at once where a whole corpus is encoded or tokenised: about 190 MB of strings at 700 characters a
# passage, and every corpus of the suite and of SciFact's size in one piece, so that each is encoded as one list.
TEXT_CHUNK = 262_144
# The files of a saved corpus (`PackedCorpus.save`, `PackedCorpus.open`).
TEXTS_FILE, OFFSETS_FILE, IDS_FILE, ID_OFFSETS_FILE = "texts.bin", "offsets.npy", "ids.bin", "id_offsets.npy"


class PackedCorpus(Mapping):
    """Document id -> text, read-only, in the order the texts were added. `text_at(row)` and `texts(start, end)`
    read by position, the order the retrievers index in."""

    def __init__(self, ids: list[str], buffer: bytes | bytearray, offsets: np.ndarray, rows: dict[str, int] | None = None):
        if len(offsets) != len(ids) + 1:
            raise ValueError(f"{len(ids)} ids need {len(ids) + 1} offsets, not {len(offsets)}")
        self._ids = ids
        self._rows = {identifier: row for row, identifier in enumerate(ids)} if rows is None else rows
        if len(self._rows) != len(ids):
            raise ValueError("document ids must be distinct")
        self._buffer = buffer
        self._offsets = offsets
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

    def __repr__(self) -> str:
        return f"PackedCorpus({len(self)} documents, {len(self._buffer):,} bytes of text)"

    def text_at(self, row: int) -> str:
        return self._buffer[self._offsets[row] : self._offsets[row + 1]].decode()

    def texts(self, start: int = 0, end: int | None = None) -> list[str]:
        """The texts of rows start to end (excluded), decoded."""
        end = len(self) if end is None else min(end, len(self))
        offsets = self._offsets[start : end + 1].tolist()
        return [self._buffer[offsets[i] : offsets[i + 1]].decode() for i in range(len(offsets) - 1)]

    @property
    def text_bytes(self) -> int:
        return len(self._buffer)

    def save(self, folder: Path) -> None:
        """Write the corpus to `folder` (which must exist) in the files `open` maps: its texts' bytes and offsets,
        and its ids packed the same way."""
        (folder / TEXTS_FILE).write_bytes(self._buffer)
        np.save(folder / OFFSETS_FILE, np.asarray(self._offsets, dtype=np.int64))
        encoded_ids = [identifier.encode() for identifier in self._ids]
        (folder / IDS_FILE).write_bytes(b"".join(encoded_ids))
        np.save(folder / ID_OFFSETS_FILE, np.concatenate([[0], np.cumsum([len(each) for each in encoded_ids])]).astype(np.int64))

    @classmethod
    def open(cls, folder: Path) -> "PackedCorpus":
        """A corpus `save` wrote, its texts and their offsets memory-mapped: the processes that open the same files
        share one copy of the texts in the operating system's page cache, read as they are touched. The ids are
        read into memory (a dict finds a document's row)."""
        id_bytes = (folder / IDS_FILE).read_bytes()
        id_offsets = np.load(folder / ID_OFFSETS_FILE).tolist()
        ids = [id_bytes[start:end].decode() for start, end in zip(id_offsets[:-1], id_offsets[1:])]
        with open(folder / TEXTS_FILE, "rb") as texts:
            # mmap cannot map an empty file: a corpus of empty texts keeps its empty buffer
            buffer = mmap.mmap(texts.fileno(), 0, access=mmap.ACCESS_READ) if texts.seek(0, 2) else b""
        corpus = cls(ids, buffer, np.load(folder / OFFSETS_FILE, mmap_mode="r"))
        corpus._folder = folder
        return corpus

    def __reduce__(self):
        """A mapped corpus is pickled as its folder (a map cannot be pickled, and another process maps the same
        files); one in memory as its ids, texts and offsets."""
        if self._folder is not None:
            return PackedCorpus.open, (self._folder,)
        return PackedCorpus, (self._ids, bytes(self._buffer), np.asarray(self._offsets))


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
        for texts in text_chunks(self._corpus):
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
