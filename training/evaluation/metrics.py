"""Retrieval metrics from ranx, with trec_eval's definitions: graded gains for nDCG, relevance > 0 counts as
relevant, and documents with equal scores ranked by document id in reverse order, as trec_eval ranks them (ranx
alone would order ties as its sort happens to leave them)."""

import warnings

from ranx import Qrels, Run, evaluate

DEFAULT_METRICS = ("ndcg@10", "mrr@10", "recall@100", "recall@1000")


def trec_order(scores: dict[str, float]) -> list[tuple[str, float]]:
    """(document id, score) best first: by score, then by document id, both descending (trec_eval's order)."""
    return sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)


def _rank_scores(scores: dict[str, float]) -> dict[str, float]:
    """Scores replaced by descending rank values, so that ranx ranks ties in trec_eval's order."""
    ranked = trec_order(scores)
    return {document_id: float(len(ranked) - rank) for rank, (document_id, _) in enumerate(ranked)}


def _ranx_evaluate(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], metrics) -> Run:
    """The ranx Run of `run` with `metrics` computed: its `mean_scores`, and its `scores` by query id (in ranx's order
    of the queries, not `qrels`')."""
    ranked = Run.from_dict({query_id: _rank_scores(scores) for query_id, scores in run.items()})
    with warnings.catch_warnings():
        # ranx's compiled metrics warn NumbaTypeSafetyWarning on every call (an int cast; harmless).
        warnings.simplefilter("ignore")
        evaluate(Qrels.from_dict(qrels), ranked, list(metrics), make_comparable=True)
    return ranked


def compute_metrics(
    qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], metrics=DEFAULT_METRICS
) -> dict[str, float]:
    """Each metric averaged over the queries of `qrels`; a query the run leaves out scores 0."""
    if not any(run.values()):  # ranx cannot rank a run without a single document (it raises)
        return {metric: 0.0 for metric in metrics}
    scored = _ranx_evaluate(qrels, run, metrics)
    return {metric: float(scored.mean_scores[metric]) for metric in metrics}


def per_query_metric(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], metric: str) -> dict[str, float]:
    """`metric` of each query of `qrels` (query id -> value; 0 where the run leaves the query out): what a paired
    comparison of two retrievers on the same queries resamples."""
    if not any(run.values()):
        return {query_id: 0.0 for query_id in qrels}
    scores = _ranx_evaluate(qrels, run, (metric,)).scores[metric]
    return {query_id: float(scores[query_id]) for query_id in qrels}
