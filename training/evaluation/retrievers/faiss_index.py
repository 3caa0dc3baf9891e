"""The index a dense retriever searches: exact or approximate (a faiss inverted file, IVF).

On the CPU, exact search reads the corpus' embedding matrix (memory-mapped from the cache, where there is one) a block
of rows at a time (`BlockedFlatIndex`): faiss' flat index would hold a second copy of every vector. Where faiss sees
GPUs, and for IVF, a faiss index is built on the CPU a chunk of vectors at a time, then searched on all the GPUs.

The GPU path follows sentence-transformers' `mine_hard_negatives` and Tevatron's search: the index is cloned to
every GPU as fp16 shards. It needs a faiss build with GPU support (`faiss-gpu`); the CPU build this package is
tested with has none, so that path is not run by the tests (`faiss.get_num_gpus()` is 0 there).
"""

import math
from collections.abc import Callable

import faiss
import numpy as np

EXACT, IVF = "exact", "ivf"
INDEX_KINDS = (EXACT, IVF)
# Chosen on the scale benchmark's synthetic corpora (benchmarks/records/scale.md): at 100k passages, 32 of 1,265 lists
# found 0.79 of exact search's top 100 and 128 found 0.97.
DEFAULT_NPROBE = 128
# faiss warns below 39 training points a list, and samples at most 256 a list for k-means itself.
MIN_POINTS_PER_LIST, MAX_POINTS_PER_LIST = 39, 256
ADD_CHUNK = 16384  # vectors added to the index at a time: 24 MiB of fp32 at 384 dimensions
BLOCK_BYTES = 2**26  # float32 vectors searched at a time by `BlockedFlatIndex`: 64 MiB, 43,690 rows at 384 dimensions


def ivf_lists(num_vectors: int) -> int:
    """The number of inverted lists for `num_vectors`: faiss' rule of thumb of 4·√N, fewer where the corpus is too
    small to train that many (at least 39 vectors a list)."""
    return max(1, min(round(4 * math.sqrt(num_vectors)), num_vectors // MIN_POINTS_PER_LIST))


def training_rows(num_vectors: int, lists: int, seed: int = 0) -> np.ndarray:
    """The rows k-means trains the lists on: a seeded sample of at most 256 a list, in ascending order so that a
    memory-mapped matrix is read front to back."""
    size = min(num_vectors, lists * MAX_POINTS_PER_LIST)
    return np.sort(np.random.default_rng(seed).choice(num_vectors, size=size, replace=False))


def build_index(
    embeddings: np.ndarray, vectors: Callable[[np.ndarray], np.ndarray], kind: str = EXACT, nprobe: int = DEFAULT_NPROBE
) -> faiss.Index:
    """A CPU index of `vectors(embeddings[rows])` for every row (`vectors` turns stored embeddings into searched
    vectors, e.g. normalised for cosine), added a chunk at a time so that building it holds the index and one chunk,
    not a second whole matrix. An IVF index keeps each vector whole (IndexIVFFlat: only the search is approximate)
    and a direct map, so a document's vector can be read back from it."""
    dimension = embeddings.shape[1]
    if kind == EXACT:
        index = faiss.IndexFlatIP(dimension)
    else:
        lists = ivf_lists(len(embeddings))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dimension), dimension, lists, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors(embeddings[training_rows(len(embeddings), lists)]))
        index.nprobe = min(nprobe, lists)
    for start in range(0, len(embeddings), ADD_CHUNK):
        index.add(vectors(embeddings[start : start + ADD_CHUNK]))
    if kind == IVF:
        index.make_direct_map()
    return index


class BlockedFlatIndex:
    """Exact inner-product search over an embedding matrix, as faiss' IndexFlatIP searches it, without copying the
    matrix: each block of rows is turned into searched vectors by `vectors` (e.g. normalised for cosine) when it is
    searched, and the blocks' top k are merged by faiss' ResultHeap. Reads back vectors as faiss indexes do
    (`reconstruct_n`, `reconstruct_batch`)."""

    def __init__(self, embeddings: np.ndarray, vectors: Callable[[np.ndarray], np.ndarray]):
        self.embeddings, self.vectors = embeddings, vectors
        self.ntotal, self.d = embeddings.shape

    def _block_rows(self) -> int:
        return max(1, BLOCK_BYTES // (4 * self.d))

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The top `k` (scores, rows) of every query, best first; -1 rows where the corpus has fewer than k."""
        results = faiss.ResultHeap(len(queries), k, keep_max=True)
        for start in range(0, self.ntotal, self._block_rows()):
            block = self.vectors(self.embeddings[start : start + self._block_rows()])
            scores, rows = faiss.knn(queries, block, min(k, len(block)), metric=faiss.METRIC_INNER_PRODUCT)
            results.add_result(scores, rows + start)
        results.finalize()
        return results.D, results.I

    def reconstruct_n(self, start: int, count: int) -> np.ndarray:
        return self.vectors(self.embeddings[start : start + count])  # one new matrix, as faiss returns

    def reconstruct_batch(self, rows: np.ndarray) -> np.ndarray:
        return self.vectors(self.embeddings[np.asarray(rows, dtype=np.int64)])


def searched_index(
    embeddings: np.ndarray, vectors: Callable[[np.ndarray], np.ndarray], kind: str = EXACT, nprobe: int = DEFAULT_NPROBE
) -> tuple:
    """(the index vectors are read back from, the index searched): exact search on the CPU reads `embeddings` a
    block at a time; otherwise a faiss index built on the CPU, and its clone on all GPUs where faiss sees any."""
    if kind == EXACT and faiss.get_num_gpus() == 0:
        index = BlockedFlatIndex(embeddings, vectors)
        return index, index
    index = build_index(embeddings, vectors, kind, nprobe)
    return index, on_all_gpus(index)


def set_nprobe(index: faiss.Index, nprobe: int) -> None:
    """Search an IVF index, or its clone on the GPUs (whose shards faiss' CPU parameter space cannot reach), `nprobe`
    lists a query from now on; its trained lists are kept."""
    space = faiss.ParameterSpace() if faiss.get_num_gpus() == 0 else faiss.GpuParameterSpace()
    space.set_index_parameter(index, "nprobe", nprobe)


def describe(index) -> str:
    """The index in a report's settings: "exact", or "ivf (nlist 288, nprobe 128)"."""
    if isinstance(index, faiss.IndexIVF):
        return f"{IVF} (nlist {index.nlist}, nprobe {index.nprobe})"
    return EXACT


def on_all_gpus(index: faiss.Index) -> faiss.Index:
    """`index` cloned to every GPU faiss sees, as fp16 shards; the CPU index itself where it sees none."""
    if faiss.get_num_gpus() == 0:
        return index
    options = faiss.GpuMultipleClonerOptions()
    options.shard = True
    options.useFloat16 = True
    return faiss.index_cpu_to_all_gpus(index, co=options)
