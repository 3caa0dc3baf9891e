"""Retrieval metrics from ranx, with trec_eval's definitions: graded gains for nDCG, relevance > 0 counts as
relevant, and documents with equal scores ranked by document id in reverse order, as trec_eval ranks them (ranx
alone would order ties as its sort happens to leave them).

ranx's metrics are compiled and cached on disk, but its `Qrels` and `Run` build numba typed dicts whose compilation is
not cached: 5 to 9 s in every process that evaluates, 28 s the first time one scored a run of 300 queries x 1,000
documents. So the judgments and the run are handed to ranx's metrics as the per-query arrays they read (a document's
number and its relevance or rank, best first), made here in Python: the same figures (checked on 200 random
collections against ranx's `Qrels`, `Run` and `evaluate`), 0.6 s for a process's first evaluation and 0.2 s for that run.
"""

import warnings

import numpy as np
from numba.typed import List as TypedList
from ranx.meta.evaluate import extract_metric_and_params
from ranx.metrics import metric_switch

DEFAULT_METRICS = ("ndcg@10", "mrr@10", "recall@100", "recall@1000")


def trec_order(scores: dict[str, float]) -> list[tuple[str, float]]:
    """(document id, score) best first: by score, then by document id, both descending (trec_eval's order)."""
    return sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)


def _per_query_scores(
    qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], metrics
) -> dict[str, np.ndarray]:
    """Each metric's score of every query of `qrels`, in `qrels`' order; a query the run leaves out scores 0 (ranx's
    `make_comparable`), and queries the run has beyond `qrels` are not scored."""
    numbers: dict[str, int] = {}  # document id -> the number ranx compares documents by (ranx hashes the ids)

    def rows(pairs: list[tuple[str, float]]) -> np.ndarray:
        documents = [numbers.setdefault(document_id, len(numbers)) for document_id, _ in pairs]
        values = [value for _, value in pairs]
        return np.column_stack((np.asarray(documents, dtype=np.float64), np.asarray(values, dtype=np.float64)))

    judged, ranked = TypedList(), TypedList()
    for query_id, judgments in qrels.items():
        # ranx reads the judgments most relevant first (its ideal ranking) and the run best first.
        judged.append(rows(sorted(judgments.items(), key=lambda item: item[1], reverse=True)))
        order = trec_order(run.get(query_id, {}))
        ranked.append(rows([(document_id, len(order) - rank) for rank, (document_id, _) in enumerate(order)]))
    with warnings.catch_warnings():
        # ranx's compiled metrics warn NumbaTypeSafetyWarning on every call (an int cast; harmless).
        warnings.simplefilter("ignore")
        scores = {}
        for metric in metrics:
            name, k, relevance_level = extract_metric_and_params(metric)  # "ndcg@10" -> ("ndcg", 10, 1)
            scores[metric] = metric_switch(name)(judged, ranked, k, relevance_level)
    return scores


def compute_metrics(
    qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], metrics=DEFAULT_METRICS
) -> dict[str, float]:
    """Each metric averaged over the queries of `qrels`; a query the run leaves out scores 0."""
    if not qrels:
        return {metric: 0.0 for metric in metrics}
    scores = _per_query_scores(qrels, run, metrics)
    return {metric: float(np.mean(scores[metric])) for metric in metrics}


def per_query_metric(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], metric: str) -> dict[str, float]:
    """`metric` of each query of `qrels` (query id -> value; 0 where the run leaves the query out): what a paired
    comparison of two retrievers on the same queries resamples."""
    if not qrels:
        return {}
    scores = _per_query_scores(qrels, run, (metric,))[metric]
    return {query_id: float(score) for query_id, score in zip(qrels, scores)}
