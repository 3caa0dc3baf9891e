"""The evaluator the sentence-transformers trainers call during fine-tuning: the command line's metrics, same code."""

from sentence_transformers import SparseEncoder
from sentence_transformers.base.evaluation import BaseEvaluator

from .collection import Collection
from .evaluate import evaluate_retriever
from .metrics import DEFAULT_METRICS
from .retrievers import DenseRetriever, SparseRetriever
from .retrievers.sparse import SPARSITY_STATS


class RetrievalEvaluator(BaseEvaluator):
    """Evaluates a SentenceTransformer (exact dense search) or a SparseEncoder (exact sparse search) on a
    collection split with `evaluate_retriever`, as `training/evaluate.py` does, and returns the metrics prefixed
    with `name` (e.g. "dev_ndcg@10", the primary metric), plus the sparse models' active dimensions and FLOPS.

    In `SentenceTransformerTrainer` and `SparseEncoderTrainer` under DDP, the trainer calls the evaluator on rank 0
    only and shares the encoding across ranks (sentence-transformers' distributed inference); the corpus is
    encoded afresh at every call, never cached, since the model changes.
    """

    def __init__(
        self,
        collection: Collection,
        name: str = "dev",
        batch_size: int = 32,
        top_k: int = 1000,
        show_progress_bar: bool = False,
        metrics=DEFAULT_METRICS,
    ):
        super().__init__()
        self.collection = collection
        self.name = name
        self.batch_size = batch_size
        self.top_k = top_k
        self.show_progress_bar = show_progress_bar
        self.metrics = tuple(metrics)
        self.primary_metric = f"{name}_{self.metrics[0]}"
        self.greater_is_better = True
        # The retriever of the last call, its corpus index included: reusable while its model is not trained further.
        self.last_retriever = None

    def __call__(self, model, output_path: str | None = None, epoch: int = -1, steps: int = -1) -> dict[str, float]:
        retriever_class = SparseRetriever if isinstance(model, SparseEncoder) else DenseRetriever
        retriever = retriever_class(
            model, name=self.name, batch_size=self.batch_size, show_progress_bar=self.show_progress_bar
        )
        result = evaluate_retriever(retriever, self.collection, self.top_k, self.metrics)
        self.last_retriever = retriever
        sparsity = {stat: value for stat, value in result.stats.items() if stat in SPARSITY_STATS}
        metrics = self.prefix_name_to_metrics({**result.metrics, **sparsity}, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    def get_config_dict(self) -> dict:
        return {
            "collection": self.collection.name, "queries": len(self.collection.queries),
            "documents": len(self.collection.corpus), "top_k": self.top_k,
        }
