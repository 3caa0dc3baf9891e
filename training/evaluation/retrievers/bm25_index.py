"""BM25's precomputed term x document score matrix (bm25s' eager index), built from every document's term ids (int32
arrays, a chunk of documents each) a block of documents at a time, in little more than the memory of the matrix.

bm25s builds the matrix one document at a time in Python, into three arrays of (score, document, term) triples, then
sorts them into its CSC form: about 36 bytes a non-zero at its peak, for a matrix of 8. Here each block's (document,
term) pairs are counted with numpy twice: once for every term's document frequency, whence the idf and where each
term's column starts; then to score the pairs and write them straight into their columns. The scores are bm25s' own,
computed by its functions on the same dtypes, so the matrix equals bm25s'. Indexing the scale benchmark's 1M passages
peaked at 1.1 GB in 87 s (1.9 GB in 79 s while the corpus' pages counted in the process) against 4.2 GB in 150 s.
"""

from collections.abc import Iterator

import bm25s
import numpy as np
from bm25s.scoring import _build_idf_array, _build_nonoccurrence_array, _select_idf_scorer, _select_tfc_scorer
from tqdm.auto import tqdm

# Tokens a block: its temporaries (document rows and int64 keys a token, counted pairs) stay near 100 MB.
BLOCK_TOKENS = 2**20


class DocumentTermIds:
    """Every document's term ids, in int32 arrays a chunk of documents each, as they were tokenised (never copied
    into one array). Four bytes a token: given a Python list of token strings, from which bm25s built lists of ids,
    indexing the scale benchmark's 1M passages peaked 619 MB higher."""

    def __init__(self):
        self.chunks: list[tuple[np.ndarray, np.ndarray]] = []  # (term ids, each document's length)

    def add(self, term_ids: np.ndarray, lengths: np.ndarray) -> None:
        self.chunks.append((term_ids, lengths))

    def __len__(self) -> int:
        return sum(len(lengths) for _, lengths in self.chunks)

    def lengths(self) -> np.ndarray:
        return np.concatenate([lengths for _, lengths in self.chunks]) if self.chunks else np.zeros(0, np.int64)

    def term_counts(self, vocabulary_size: int, description: str, show_progress: bool) -> Iterator[tuple[np.ndarray, ...]]:
        """Each document's distinct terms and how often each occurs, a block of about BLOCK_TOKENS tokens at a time:
        (rows, terms, counts), ordered by row (the document's position) then term."""
        progress = tqdm(total=len(self), desc=description, disable=not show_progress, leave=False)
        chunk_row = 0
        for term_ids, lengths in self.chunks:
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            first = 0
            while first < len(lengths):
                # at least one document a block, however long
                last = max(first + 1, int(np.searchsorted(offsets, offsets[first] + BLOCK_TOKENS, "right")) - 1)
                last = min(last, len(lengths))
                tokens = term_ids[offsets[first]:offsets[last]]
                local_rows = np.repeat(np.arange(last - first, dtype=np.int64), lengths[first:last])
                pairs, counts = np.unique(local_rows * vocabulary_size + tokens, return_counts=True)
                yield pairs // vocabulary_size + (chunk_row + first), (pairs % vocabulary_size).astype(np.int32), counts
                progress.update(last - first)
                first = last
            chunk_row += len(lengths)
        progress.close()


class TermIdsBM25(bm25s.BM25):
    """bm25s' BM25 whose index, given `DocumentTermIds`, is built by `score_matrix`; given anything else, by bm25s
    (which documents `build_index_from_ids` as the method to override for another build)."""

    def build_index_from_ids(self, unique_token_ids, corpus_token_ids, show_progress=True, leave_progress=False):
        if not isinstance(corpus_token_ids, DocumentTermIds):
            return super().build_index_from_ids(unique_token_ids, corpus_token_ids, show_progress, leave_progress)
        return self.score_matrix(corpus_token_ids, len(unique_token_ids), show_progress)

    def score_matrix(self, documents: DocumentTermIds, vocabulary_size: int, show_progress: bool) -> dict:
        """bm25s' `scores`: the CSC matrix of every (document, term) pair's BM25 score, columns by term, rows
        (document positions) ascending in each column."""
        lengths = documents.lengths()
        average_length = lengths.mean()  # as bm25s takes it: the mean of an int64 array
        frequencies = np.zeros(vocabulary_size, dtype=np.int64)
        for _, terms, _ in documents.term_counts(vocabulary_size, "BM25 document frequencies", show_progress):
            frequencies += np.bincount(terms, minlength=vocabulary_size)
        document_frequencies = dict(enumerate(frequencies.tolist()))
        idf = _build_idf_array(document_frequencies, len(documents), _select_idf_scorer(self.idf_method), self.dtype)
        nonoccurrence = None
        if self.method in self.methods_requiring_nonoccurrence:
            nonoccurrence = _build_nonoccurrence_array(
                document_frequencies, len(documents), _select_idf_scorer(self.idf_method),
                _select_tfc_scorer(self.method), average_length, average_length, self.k1, self.b, self.delta, self.dtype,
            )
        self.nonoccurrence_array = nonoccurrence
        term_frequency_component = _select_tfc_scorer(self.method)

        indptr = np.zeros(vocabulary_size + 1, dtype=np.int64)
        np.cumsum(frequencies, out=indptr[1:])
        data = np.empty(indptr[-1], dtype=self.dtype)
        indices = np.empty(indptr[-1], dtype=self.int_dtype)
        next_free = indptr[:-1].copy()  # where each column's next pair goes
        for rows, terms, counts in documents.term_counts(vocabulary_size, "BM25 scores", show_progress):
            # bm25s scores a document's float32 term counts against its length as a Python int: the same operations
            # here, element by element, so every score rounds as bm25s' does.
            component = term_frequency_component(
                tf_array=counts.astype(self.dtype), l_d=lengths[rows], l_avg=average_length, k1=self.k1, b=self.b,
                delta=self.delta,
            )
            scores = idf[terms] * component
            if nonoccurrence is not None:
                scores -= nonoccurrence[terms]
            by_term = np.argsort(terms, kind="stable")  # rows stay ascending within a term
            terms = terms[by_term]
            block_frequencies = np.bincount(terms, minlength=vocabulary_size)
            block_starts = np.cumsum(block_frequencies) - block_frequencies
            positions = next_free[terms] + (np.arange(len(terms)) - block_starts[terms])
            data[positions] = scores[by_term]
            indices[positions] = rows[by_term]
            next_free += block_frequencies
        return {"data": data, "indices": indices, "indptr": indptr, "num_docs": len(documents)}
