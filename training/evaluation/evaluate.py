"""One retriever on one collection split: index, search, score. The same function serves the command line, the
fine-tuning evaluator and the benchmarks."""

import logging
from dataclasses import dataclass

from ..data.collection import Collection
from .metrics import DEFAULT_METRICS, compute_metrics
from .retrievers.base import Retriever, Run

logger = logging.getLogger(__name__)


@dataclass
class EvaluationResult:
    name: str
    metrics: dict[str, float]  # metric -> mean over the collection's queries
    stats: dict[str, float]  # encode_seconds, search_seconds, and what the retriever adds (e.g. sparse statistics)
    settings: dict  # how the retriever was configured
    run: Run  # query id -> {document id: score}, the top_k documents of each query


def evaluate_retriever(
    retriever: Retriever, collection: Collection, top_k: int = 1000, metrics=DEFAULT_METRICS
) -> EvaluationResult:
    """Index the collection's corpus (nothing is done when the retriever already holds it), search its queries
    for the `top_k` best documents each, and score the run against its judgments."""
    retriever.index(collection.corpus)
    run = retriever.search(collection.queries, top_k)
    if collection.queries and not any(run.values()):
        logger.warning(
            "%s found no document for any of the %d queries of %s (for BM25: no query shares a word with the corpus), "
            "so every metric is 0.", retriever.name, len(collection.queries), collection.name,
        )
    return EvaluationResult(
        name=retriever.name,
        metrics=compute_metrics(collection.qrels, run, metrics),
        stats=retriever.stats(),
        settings=retriever.settings,
        run=run,
    )
