"""Retrieval metrics from ranx (trec_eval's definitions: graded gains for nDCG, relevance > 0 counts as relevant)."""

import warnings

from ranx import Qrels, Run, evaluate

DEFAULT_METRICS = ("ndcg@10", "mrr@10", "recall@100", "recall@1000")


def compute_metrics(
    qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], metrics=DEFAULT_METRICS
) -> dict[str, float]:
    """Each metric averaged over the queries of `qrels`; a query the run leaves out scores 0."""
    with warnings.catch_warnings():
        # ranx's compiled metrics warn NumbaTypeSafetyWarning on every call (an int cast; harmless).
        warnings.simplefilter("ignore")
        values = evaluate(Qrels.from_dict(qrels), Run.from_dict(run), list(metrics), make_comparable=True)
    if len(metrics) == 1:  # ranx returns a bare number for a single metric
        values = {metrics[0]: values}
    return {metric: float(values[metric]) for metric in metrics}
