"""Dense retrieval: inner-product search with faiss over the whole corpus (exact by default), embeddings optionally
cached on disk."""

import time
from collections.abc import Mapping

import faiss
import numpy as np
from sentence_transformers import SentenceTransformer
from tqdm.auto import tqdm

from ...common.errors import InputError
from ...data.packed_corpus import text_chunks
from ..embedding_cache import EMBEDDING_DTYPES, cached_embeddings, model_cache_file
from .base import Retriever, Run, run_from_top_k
from .faiss_index import DEFAULT_NPROBE, EXACT, INDEX_KINDS, IVF, describe, searched_index, set_nprobe

SEARCH_CHUNK = 1024  # queries per faiss call (one progress step)


class DenseRetriever(Retriever):
    """Encodes documents with `encode_document` and queries with `encode_query` (the model's prompts, if it has
    any; plain `encode` otherwise), and ranks by the model's similarity: cosine (inner product of L2-normalised
    vectors) or dot product.

    With `cache_dir` and `cache_key` (the identity of the model's weights, `weights_fingerprint(model)`), corpus
    embeddings are read from and written to `cache_dir`, keyed by that identity, the tokenizer, the model's modules
    (pooling, max_seq_length, normalisation), its prompts and the corpus' texts in order (not their ids).

    `index_kind` "ivf" searches an inverted file (`nprobe` lists a query) instead of the whole corpus: for mining at
    large N, where exact search grows with N per query (see `faiss_index.py` and the scale benchmark's recall). The
    index is searched on all GPUs faiss sees, if any. `embedding_dtype` "float16" stores the corpus' embeddings
    (in the cache file, and in memory before indexing) at half the bytes; they are searched as float32.
    """

    def __init__(
        self,
        model: SentenceTransformer,
        name: str,
        batch_size: int = 32,
        cache_dir: str | None = None,
        cache_key: str | None = None,
        show_progress_bar: bool = True,
        index_kind: str = EXACT,
        nprobe: int = DEFAULT_NPROBE,
        embedding_dtype: str = "float32",
    ):
        super().__init__(name)
        if index_kind not in INDEX_KINDS:
            raise InputError(f"{name}: index {index_kind!r}; choose one of {', '.join(INDEX_KINDS)}.")
        if embedding_dtype not in EMBEDDING_DTYPES:
            raise InputError(f"{name}: embedding dtype {embedding_dtype!r}; choose one of {', '.join(EMBEDDING_DTYPES)}.")
        if model.similarity_fn_name not in ("cosine", "dot"):
            raise InputError(
                f"{name}: the model's similarity function is {model.similarity_fn_name!r}; inner-product search "
                "ranks by 'cosine' or 'dot'. Set similarity_fn_name in its config_sentence_transformers.json."
            )
        self.model = model
        self.batch_size = batch_size
        self.cache_dir = cache_dir
        self.cache_key = cache_key
        self.show_progress_bar = show_progress_bar
        self.settings = {"similarity": model.similarity_fn_name, "max_seq_length": model.max_seq_length}
        self.index_kind = index_kind
        self.nprobe = nprobe
        self.embedding_dtype = embedding_dtype
        self.corpus_from_cache = False
        self.cache_file = None  # where the corpus' encoding is kept, once indexed with a cache
        self._index = None  # on the CPU: documents' vectors are read back from it
        self._search_index = None  # the same, or a faiss index's clone on the GPUs

    def _embeddings(self, encode, texts: list[str]) -> np.ndarray:
        """`encode` (the model's encode_document or encode_query) of `texts`, as the model outputs them, at the model's
        length now. The length goes with the texts: under sentence-transformers' distributed evaluation (and
        `common/shared_encoding.py`) the other processes encode their slices with their own copies of the model, at
        their own length, which is the training length where an evaluator judges at the published one."""
        length = self.model.max_seq_length
        return encode(
            texts, batch_size=self.batch_size, show_progress_bar=self.show_progress_bar, convert_to_numpy=True,
            processing_kwargs=None if length is None else {"text": {"max_length": length}},
        )

    def _vectors(self, embeddings: np.ndarray) -> np.ndarray:
        """The vectors searched by inner product, a new array: L2-normalised for a cosine model."""
        vectors = np.array(embeddings, dtype=np.float32, order="C")  # a copy: the cached matrix is read-only
        if self.model.similarity_fn_name == "cosine":
            faiss.normalize_L2(vectors)
        return vectors

    def _document_embeddings(self, corpus: Mapping[str, str]) -> np.ndarray:
        suffix = ".npy" if self.embedding_dtype == "float32" else f".{self.embedding_dtype}.npy"
        self.cache_file = model_cache_file(self.cache_dir, self.cache_key, self.model, self.texts_fingerprint, suffix)
        embeddings, self.corpus_from_cache = cached_embeddings(
            self.cache_file,
            len(corpus),
            lambda: self._corpus_embeddings(corpus),
        )
        return embeddings

    def _corpus_embeddings(self, corpus: Mapping[str, str]) -> np.ndarray:
        """The corpus encoded a chunk of texts at a time (a packed corpus decodes one chunk at a time), into one
        matrix of `embedding_dtype`: concatenating the chunks would hold the matrix twice."""
        matrix, start = None, 0
        for texts in text_chunks(corpus):
            chunk = self._embeddings(self.model.encode_document, texts)
            if matrix is None:
                matrix = np.empty((len(corpus), chunk.shape[1]), dtype=self.embedding_dtype)
            matrix[start : start + len(chunk)] = chunk
            start += len(chunk)
        return matrix

    def _build_index(self, corpus: Mapping[str, str]) -> None:
        """The index of the corpus' (memory-mapped) embeddings: on the CPU, exact search reads them a block at a
        time; a faiss index (IVF, or any on GPUs) is built from them a chunk at a time. Neither holds a second whole
        matrix beside them."""
        self._index, self._search_index = searched_index(
            self._document_embeddings(corpus), self._vectors, self.index_kind, self.nprobe
        )
        self.settings["index"] = describe(self._index)

    def search_lists(self, nprobe: int) -> None:
        """Search the IVF index already built `nprobe` lists a query from now on, without training it again: recall
        against speed, measured on one index."""
        if self.index_kind != IVF or self._index is None:
            raise ValueError(f"{self.name}: search_lists changes an IVF index once built (index_kind='ivf', then index())")
        self.nprobe = nprobe
        set_nprobe(self._index, nprobe)
        if self._search_index is not self._index:  # its clone on the GPUs
            set_nprobe(self._search_index, nprobe)
        self.settings["index"] = describe(self._index)

    def _search(self, queries: dict[str, str], top_k: int) -> Run:
        start = time.perf_counter()
        vectors = self._vectors(self._embeddings(self.model.encode_query, list(queries.values())))
        self._seconds["query_encode_seconds"] = time.perf_counter() - start  # the rest of search_seconds is faiss'
        scores, indices = [], []
        starts = range(0, len(vectors), SEARCH_CHUNK)
        for start in tqdm(starts, desc="Searching", unit="chunk", disable=not self.show_progress_bar):
            chunk_scores, chunk_indices = self._search_index.search(vectors[start : start + SEARCH_CHUNK], top_k)
            scores.append(chunk_scores)
            indices.append(chunk_indices)
        return run_from_top_k(list(queries), self.document_ids, np.concatenate(indices), np.concatenate(scores))

    def corpus_vectors(self) -> np.ndarray:
        """The indexed documents' vectors, in corpus order, as they are searched (normalised for a cosine model)."""
        if self._index is None:
            raise RuntimeError(f"{self.name}: index a corpus first.")
        return self._index.reconstruct_n(0, self._index.ntotal)

    def pair_scores(self, queries: list[str], document_ids: list[str]) -> np.ndarray:
        """The model's similarities of the (query text, indexed document id) pairs: each distinct query encoded once,
        each document's vector read from the index instead of being encoded again."""
        query_rows = {text: row for row, text in enumerate(dict.fromkeys(queries))}
        query_vectors = self._vectors(self._embeddings(self.model.encode_query, list(query_rows)))
        # Only the pairs' rows: reconstructing the whole index first took 8.8 s for 8 pairs at 1.28M vectors.
        rows = self.document_rows(document_ids)
        document_vectors = self._index.reconstruct_batch(rows) if len(rows) else np.zeros((0, self._index.d), np.float32)
        return np.einsum("ij,ij->i", query_vectors[[query_rows[text] for text in queries]], document_vectors)

    def stats(self) -> dict[str, float]:
        return {**super().stats(), "corpus_from_cache": float(self.corpus_from_cache)}
