"""Sparse search that fits: `sparse_top_k` (a fixed batch of queries against a block of documents at a time, each
query's top k merged across blocks) against the search before issue #54 (a batch of ⌊2**25 / N⌋ queries scored
against the whole corpus through an inverted index, a transposed copy of it), side by side in one process.

Synthetic SPLADE-like vectors over BERT's 30,522-word vocabulary: about 150 non-zeros a document and 20 a query
(uniform random terms and weights). Per corpus size: seconds per search (median over rounds, contenders in turn),
the peak memory numpy allocates during a search (tracemalloc, in one more call), the corpus' index in memory, the
queries scored per batch, and whether both return the same scores and documents.

    python -m benchmarks.sparse_search   # 10,000, 100,000 and 1,000,000 documents, 1,000 queries, 3 rounds
"""

import argparse
import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from benchmarks.harness import interleaved_seconds, markdown_table, ratio_cell
from training.evaluation.retrievers import sparse as sparse_retriever
from training.evaluation.retrievers.sparse import sparse_top_k

VOCABULARY = 30522
WHOLE_CORPUS_SCORE_VALUES = 2**25  # the search before #54: dense scores of a batch of queries over the whole corpus


def synthetic_vectors(rows: int, active: int, seed: int) -> sparse.csr_matrix:
    """`rows` float32 vectors over the vocabulary with `active` random terms each (repeats dropped, so a few
    fewer) and weights uniform in (0, 1], column indices sorted, as `to_csr` makes them."""
    rng = np.random.default_rng(seed)
    chunks = []
    for start in range(0, rows, 100_000):
        terms = np.sort(rng.integers(0, VOCABULARY, (min(100_000, rows - start), active), dtype=np.int32), axis=1)
        keep = np.ones(terms.shape, dtype=bool)
        keep[:, 1:] = terms[:, 1:] != terms[:, :-1]
        indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))])
        weights = 1 - rng.random(int(indptr[-1]), dtype=np.float32)
        chunks.append(sparse.csr_matrix((weights, terms[keep], indptr), shape=(len(terms), VOCABULARY)))
    return sparse.vstack(chunks, format="csr")


# What is timed ----------------------------------------------------------------------------------------------


def whole_corpus_top_k(queries: sparse.csr_matrix, postings: sparse.csr_matrix, top_k: int):
    """The search before #54, as it was: ⌊2**25 / N⌋ queries at a time, their scores over the whole corpus made
    dense, then each row's top k by argpartition."""
    batch = max(1, WHOLE_CORPUS_SCORE_VALUES // postings.shape[1])
    indices, scores = [], []
    for start in range(0, queries.shape[0], batch):
        batch_scores = (queries[start : start + batch] @ postings).toarray()
        candidates = np.argpartition(-batch_scores, top_k - 1, axis=1)[:, :top_k]
        candidate_scores = np.take_along_axis(batch_scores, candidates, axis=1)
        order = np.argsort(-candidate_scores, axis=1, kind="stable")
        indices.append(np.take_along_axis(candidates, order, axis=1))
        scores.append(np.take_along_axis(candidate_scores, order, axis=1))
    return np.concatenate(indices), np.concatenate(scores)


def traced(search: Callable[[], object]) -> tuple[object, int]:
    """What `search` returns, and the peak of the memory numpy and Python allocated meanwhile (bytes)."""
    tracemalloc.start()
    result = search()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return result, peak


def agreement(before: tuple[np.ndarray, np.ndarray], after: tuple[np.ndarray, np.ndarray]) -> str:
    """Whether two searches return the same scores, and at how many ranks they return different documents where
    the score is not tied (where it is, the search before #54 took whichever argpartition put first). The last
    rank's score counts as tied: a document left out may share it."""
    (before_indices, before_scores), (after_indices, after_scores) = before, after
    tied = after_scores == after_scores[:, -1:]
    equal_neighbours = after_scores[:, 1:] == after_scores[:, :-1]
    tied[:, 1:] |= equal_neighbours
    tied[:, :-1] |= equal_neighbours
    different = before_indices != after_indices
    scores = "bit-identical" if np.array_equal(before_scores, after_scores) else "DIFFERENT"
    return (
        f"scores {scores}; other documents at {int((different & ~tied).sum())} untied ranks "
        f"({int(different.any(axis=1).sum())} queries order tied ones otherwise)"
    )


def csr_bytes(matrix: sparse.csr_matrix) -> int:
    return matrix.data.nbytes + matrix.indices.nbytes + matrix.indptr.nbytes


# Runs -------------------------------------------------------------------------------------------------------

BEFORE, BLOCKED = "whole corpus (before #54)", "blocks of documents (`sparse_top_k`)"
COLUMNS = [
    "documents", "search", "queries a batch", "seconds (median)", "time vs before", "peak MiB during search",
    "index MiB", "results vs before",
]


@dataclass
class Contender:
    search: Callable[[], tuple[np.ndarray, np.ndarray]]
    queries_per_batch: int
    index_bytes: int  # the corpus as the search keeps it


def contenders(corpus: sparse.csr_matrix, queries: sparse.csr_matrix, top_k: int, before: bool) -> dict[str, Contender]:
    found = {}
    if before:
        postings = corpus.T.tocsr()
        found[BEFORE] = Contender(
            lambda: whole_corpus_top_k(queries, postings, top_k),
            min(queries.shape[0], max(1, WHOLE_CORPUS_SCORE_VALUES // corpus.shape[0])),
            csr_bytes(corpus) + csr_bytes(postings),
        )
    found[BLOCKED] = Contender(
        lambda: sparse_top_k(queries, corpus, top_k),
        min(sparse_retriever.QUERY_BATCH, queries.shape[0]),
        csr_bytes(corpus),
    )
    return found


def measure(documents: int, queries: sparse.csr_matrix, args) -> list[list[str]]:
    started = time.perf_counter()
    corpus = synthetic_vectors(documents, args.document_terms, seed=documents)
    searches = contenders(corpus, queries, args.top_k, before=documents <= args.before_up_to)
    print(f"[{documents:,} documents] built in {time.perf_counter() - started:.0f} s; searching ...", flush=True)
    seconds = interleaved_seconds({name: contender.search for name, contender in searches.items()}, args.rounds)
    results, peaks = {}, {}
    for name, contender in searches.items():
        results[name], peaks[name] = traced(contender.search)
    rows = []
    for name, contender in searches.items():
        compared = BEFORE in searches and name != BEFORE
        rows.append([
            f"{documents:,}", name, str(contender.queries_per_batch), f"{statistics.median(seconds[name]):.2f}",
            ratio_cell(seconds[name], seconds[BEFORE]) if BEFORE in searches else "—",
            f"{peaks[name] / 2**20:,.0f}", f"{contender.index_bytes / 2**20:,.0f}",
            agreement(results[BEFORE], results[name]) if compared else "—",
        ])
    print(markdown_table(COLUMNS, rows), flush=True)
    return rows


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--document_terms", type=int, default=150, help="Non-zeros drawn per document.")
    parser.add_argument("--query_terms", type=int, default=20, help="Non-zeros drawn per query.")
    parser.add_argument("--top_k", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before_up_to", type=int, default=1_000_000,
                        help="Run the search before #54 on corpora up to this size only.")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    queries = synthetic_vectors(args.queries, args.query_terms, seed=0)
    rows = [row for documents in args.documents for row in measure(documents, queries, args)]
    print(f"\nSparse search: {args.queries:,} queries (~{args.query_terms} terms) x synthetic corpora "
          f"(~{args.document_terms} terms a document), top {args.top_k}, {args.rounds} rounds\n")
    print(markdown_table(COLUMNS, rows))


if __name__ == "__main__":
    main()
