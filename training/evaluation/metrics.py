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


def compute_metrics(
    qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], metrics=DEFAULT_METRICS
) -> dict[str, float]:
    """Each metric averaged over the queries of `qrels`; a query the run leaves out scores 0."""
    ranked = {query_id: _rank_scores(scores) for query_id, scores in run.items()}
    with warnings.catch_warnings():
        # ranx's compiled metrics warn NumbaTypeSafetyWarning on every call (an int cast; harmless).
        warnings.simplefilter("ignore")
        values = evaluate(Qrels.from_dict(qrels), Run.from_dict(ranked), list(metrics), make_comparable=True)
    if len(metrics) == 1:  # ranx returns a bare number for a single metric
        values = {metrics[0]: values}
    return {metric: float(values[metric]) for metric in metrics}
