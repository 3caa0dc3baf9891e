"""The evaluator the sentence-transformers trainers call during fine-tuning: the command line's metrics, same code."""

from collections.abc import Iterator
from contextlib import contextmanager

from sentence_transformers import SparseEncoder
from sentence_transformers.base.evaluation import BaseEvaluator

from ..common.timing import PhaseTimer
from ..data.collection import Collection
from .embedding_cache import CacheLedger, weights_fingerprint
from .evaluate import evaluate_retriever
from .metrics import DEFAULT_METRICS, per_query_metric
from .retrievers import DenseRetriever, Retriever, SparseRetriever
from .retrievers.sparse import SPARSITY_STATS

EVALUATION = "evaluation"
CORPUS_ENCODING = "corpus encoding"


def model_retriever(
    model, name: str, batch_size: int, cache_dir: str | None, show_progress_bar: bool = True, **dense_settings
) -> Retriever:
    """Search with a model being trained: dense for a SentenceTransformer (`dense_settings` are DenseRetriever's:
    exact unless `index_kind` asks for an approximate index, `nprobe`, `embedding_dtype`), exact sparse search for a
    SparseEncoder (the pipelines refuse dense-only settings for it before any work). With `cache_dir`, its
    encoded corpus is kept there under the identity of its current weights, so the same weights never encode the
    same corpus twice, and weights trained any further never read another's."""
    cache_key = None if cache_dir is None else weights_fingerprint(model)
    if isinstance(model, SparseEncoder):
        return SparseRetriever(
            model, name=name, batch_size=batch_size, show_progress_bar=show_progress_bar, cache_dir=cache_dir,
            cache_key=cache_key,
        )
    return DenseRetriever(
        model, name=name, batch_size=batch_size, show_progress_bar=show_progress_bar, cache_dir=cache_dir,
        cache_key=cache_key, **dense_settings,
    )


@contextmanager
def at_length(model, max_seq_length: int | None) -> Iterator:
    """`model` truncating its inputs at `max_seq_length` tokens inside the block (unchanged where None), and at its
    own length again after it: a model trained at one length is judged at the length it will be served at."""
    if max_seq_length is None:
        yield model
        return
    own = model.max_seq_length
    model.max_seq_length = max_seq_length
    try:
        yield model
    finally:
        model.max_seq_length = own


def indexed(
    retriever: Retriever, corpus: dict[str, str], timer: PhaseTimer, ledger: CacheLedger | None = None
) -> Retriever:
    """`retriever` with `corpus` indexed (indexing it again later does nothing); an encoding of the corpus, not a
    read from the cache, is timed as one, and the cache file it wrote goes to `ledger`."""
    retriever.index(corpus)
    if not retriever.corpus_from_cache:
        timer.record(CORPUS_ENCODING, retriever.stats()["encode_seconds"])
        if ledger is not None and retriever.cache_file is not None:
            ledger.record(retriever.cache_key, retriever.cache_file)
    return retriever


class RetrievalEvaluator(BaseEvaluator):
    """Evaluates a SentenceTransformer (exact dense search) or a SparseEncoder (exact sparse search) on a
    collection split with `evaluate_retriever`, as `training/evaluate.py` does, and returns the metrics prefixed
    with `name` (e.g. "dev_ndcg@10", the primary metric), plus the sparse models' active dimensions and FLOPS.

    In `SentenceTransformerTrainer` and `SparseEncoderTrainer` under DDP, the trainer calls the evaluator on rank 0
    only and shares the encoding across ranks (sentence-transformers' distributed inference). The corpus is
    encoded at every call unless `cache_dir` is given: then once per weights (see `model_retriever`). Its time
    goes to `timer`: evaluation, and corpus encoding apart; the cache files it writes, to `ledger`.

    With `max_seq_length` the model is evaluated at that length, whatever length it trains at. After each call
    `per_query` holds the primary metric of each query (query id -> value), for a paired comparison of two models.
    """

    def __init__(
        self,
        collection: Collection,
        name: str = "dev",
        batch_size: int = 32,
        top_k: int = 1000,
        show_progress_bar: bool = False,
        metrics=DEFAULT_METRICS,
        cache_dir: str | None = None,
        timer: PhaseTimer | None = None,
        max_seq_length: int | None = None,
        ledger: CacheLedger | None = None,
        embedding_dtype: str = "float32",
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
        self.cache_dir = cache_dir
        self.timer = timer or PhaseTimer()
        self.max_seq_length = max_seq_length
        self.ledger = ledger
        self.embedding_dtype = embedding_dtype
        self.per_query: dict[str, float] | None = None

    def __call__(self, model, output_path: str | None = None, epoch: int = -1, steps: int = -1) -> dict[str, float]:
        with self.timer.phase(EVALUATION), at_length(model, self.max_seq_length):
            retriever = model_retriever(
                model, self.name, self.batch_size, self.cache_dir, self.show_progress_bar, **self.dense_settings(model)
            )
            indexed(retriever, self.collection.corpus, self.timer, self.ledger)
            result = evaluate_retriever(retriever, self.collection, self.top_k, self.metrics)
            self.per_query = per_query_metric(self.collection.qrels, result.run, self.metrics[0])
        sparsity = {stat: value for stat, value in result.stats.items() if stat in SPARSITY_STATS}
        metrics = self.prefix_name_to_metrics({**result.metrics, **sparsity}, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    def dense_settings(self, model) -> dict:
        """What a dense model's retriever takes beyond a sparse one's."""
        return {} if isinstance(model, SparseEncoder) else {"embedding_dtype": self.embedding_dtype}

    def get_config_dict(self) -> dict:
        return {
            "collection": self.collection.name, "queries": len(self.collection.queries),
            "documents": len(self.collection.corpus), "top_k": self.top_k, "max_seq_length": self.max_seq_length,
        }
