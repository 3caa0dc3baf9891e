"""Hard negatives mined from a retriever's ranking of the whole corpus.

One miner serves BM25, the dense model being trained (ANCE-style) and a sparse model alike,
through the evaluation package's retrievers. sentence-transformers' `mine_hard_negatives` is not
used: it is dense and cosine only, has no BM25, and caches corpus embeddings under the base
model's name, so re-mining after a round of training would silently reuse the old embeddings.
"""

import random

from ..evaluation.retrievers import Retriever
from .training_set import TrainingSet


def mine_negative_candidates(
    retriever: Retriever, training_set: TrainingSet, range_min: int, range_max: int
) -> dict[str, list[str]]:
    """For each training query, the documents the retriever ranks range_min..range_max-1 (0-based), best first,
    without any document judged relevant to the query. Skipping the top ranks keeps unjudged positives,
    which sit there, from being taught as negatives."""
    retriever.index(training_set.corpus)
    ranking = retriever.search(training_set.queries, top_k=range_max)
    candidates = {}
    for query_id in training_set.queries:
        scores = ranking.get(query_id, {})
        ranked = sorted(scores, key=lambda doc_id: (-scores[doc_id], doc_id))[range_min:range_max]
        positives = set(training_set.positives(query_id))
        candidates[query_id] = [doc_id for doc_id in ranked if doc_id not in positives]
    return candidates


def draw_negatives(
    candidates: dict[str, list[str]], training_set: TrainingSet, count: int, seed: int
) -> list[tuple[str, str, list[str]]]:
    """(query id, positive id, `count` negative ids) for every training pair.

    Negatives are drawn at random among the query's candidates (a different draw for each of its
    positives); a query with too few candidates is topped up with random non-positive documents,
    so every example has the same number of texts.
    """
    rng = random.Random(seed)
    corpus_ids = None  # sorted, made where a query first runs short: a list of every id costs ~0.6 GB at 8.8M
    examples = []
    for query_id, positive_id in training_set.pairs():
        pool = candidates.get(query_id, [])
        negatives = rng.sample(pool, min(count, len(pool)))
        excluded = set(training_set.positives(query_id)) | set(negatives)
        if len(negatives) < count and corpus_ids is None:
            corpus_ids = sorted(training_set.corpus)
        while len(negatives) < count and len(excluded) < len(training_set.corpus):
            doc_id = rng.choice(corpus_ids)
            if doc_id not in excluded:
                negatives.append(doc_id)
                excluded.add(doc_id)
        examples.append((query_id, positive_id, negatives))
    return examples
