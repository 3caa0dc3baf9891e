"""Hybrid retrieval: the member retrievers' runs fused with ranx."""

import warnings
from collections.abc import Mapping

from ranx import Qrels, Run as RanxRun, fuse, optimize_fusion

from ..metrics import trec_order
from .base import Retriever, Run

# Our fusion names -> ranx's method and score normalisation.
FUSION_METHODS = {
    "rrf": ("rrf", None),  # reciprocal rank fusion: sum of 1 / (k + rank), k = 60; ranks only, no normalisation
    "score_sum": ("wsum", "min-max"),  # weighted sum of each run's scores, min-max normalised per query
}


class HybridRetriever(Retriever):
    """Fuses the runs of `retrievers` with ranx: `method` "rrf" (reciprocal rank fusion, k = 60) or "score_sum"
    (min-max normalised scores summed with `weights`, equal by default). `tune` sets k or the weights on another
    split with ranx.optimize_fusion. Members may be shared with other retrievers: indexing an already indexed
    member does nothing."""

    def __init__(self, retrievers: list[Retriever], method: str = "rrf", weights: list[float] | None = None, name: str | None = None):
        if method not in FUSION_METHODS:
            raise ValueError(f"fusion method {method!r}: expected one of {', '.join(FUSION_METHODS)}")
        if len(retrievers) < 2:
            raise ValueError("a hybrid fuses at least two retrievers")
        if weights is not None and (method != "score_sum" or len(weights) != len(retrievers)):
            raise ValueError("weights need method='score_sum' and one weight per retriever")
        super().__init__(name or "hybrid:" + "+".join(member.name for member in retrievers))
        self.retrievers = retrievers
        self.method = method
        if method == "rrf":
            self.params = {"k": 60}
        else:
            self.params = {"weights": weights or [1 / len(retrievers)] * len(retrievers)}
        self.settings = {"fusion": method, "params": self.params}

    def _build_index(self, corpus: Mapping[str, str]) -> None:
        for member in self.retrievers:
            member.index(corpus)

    def _member_runs(self, queries: dict[str, str], top_k: int) -> list[RanxRun]:
        return [RanxRun.from_dict(member.search(queries, top_k), name=member.name) for member in self.retrievers]

    def _search(self, queries: dict[str, str], top_k: int) -> Run:
        method, norm = FUSION_METHODS[self.method]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numba type-safety warnings from ranx (harmless)
            fused = fuse(self._member_runs(queries, top_k), norm=norm, method=method, params=self.params).to_dict()
        return {query_id: dict(trec_order(scores)[:top_k]) for query_id, scores in fused.items()}

    def tune(self, queries: dict[str, str], qrels: dict[str, dict[str, int]], top_k: int, split: str, metric: str = "ndcg@10") -> None:
        """Choose k (rrf) or the weights (score_sum) that maximise `metric` on `queries`/`qrels` of another split."""
        method, norm = FUSION_METHODS[self.method]
        runs = self._member_runs(queries, min(top_k, len(self.document_ids)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.params = optimize_fusion(
                Qrels.from_dict(qrels), runs, norm=norm, method=method, metric=metric, show_progress=False
            )
        self.settings = {"fusion": self.method, "params": self.params, "tuned_on": split, "tuned_for": metric}

    def stats(self) -> dict[str, float]:
        # Building a hybrid costs what its members' indexes cost, wherever they were built.
        return {**super().stats(), "encode_seconds": sum(m.stats()["encode_seconds"] for m in self.retrievers)}
