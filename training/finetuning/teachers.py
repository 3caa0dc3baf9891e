"""Distillation teachers: what scores a (query, document) pair, and the ensemble of several.

A teacher may differ from the student in tokenizer and size: it sees only texts. Each teacher's
scores are standardised over all the pairs it scored (zero mean, unit variance) before an
ensemble averages them, as SPLADE++'s EnsembleDistil combines teachers on different scales.
"""

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..common.errors import InputError
from ..common.models import has_mlm_head, load_sentence_transformer, load_sparse_encoder, model_kind, split_model_spec
from ..common.sparse_encoding import encode_sparse
from ..data.packed_corpus import RowsByText
from ..evaluation.retrievers import BM25Retriever

BM25_TEACHER = "bm25"
START_TEACHER = "start"  # the starting checkpoint, frozen


def distinct(texts: list[str]) -> tuple[list[str], list[int]]:
    """The distinct texts, in the order they first appear, and the row of each of `texts` among them: a teacher
    encodes each distinct text once, however many pairs it is in (a query is in one per negative, and more)."""
    rows = {text: row for row, text in enumerate(dict.fromkeys(texts))}
    return list(rows), [rows[text] for text in texts]


class BiEncoderTeacher:
    """A SentenceTransformer: the similarity of the query's and the document's embeddings, each distinct text encoded
    once."""

    def __init__(self, path: str, batch_size: int = 64):
        self.name, self.batch_size = path, batch_size
        self.model = load_sentence_transformer(path)

    def score(self, queries: list[str], documents: list[str]) -> np.ndarray:
        (query_texts, query_rows), (document_texts, document_rows) = distinct(queries), distinct(documents)
        query_embeddings = self.model.encode(query_texts, batch_size=self.batch_size, convert_to_tensor=True)
        document_embeddings = self.model.encode(document_texts, batch_size=self.batch_size, convert_to_tensor=True)
        pairs = query_embeddings[query_rows], document_embeddings[document_rows]
        return self.model.similarity_pairwise(*pairs).float().cpu().numpy()


class CrossEncoderTeacher:
    """A CrossEncoder: its relevance score of the (query, document) pair read together."""

    def __init__(self, path: str, batch_size: int = 64):
        from sentence_transformers import CrossEncoder

        self.name, self.batch_size = path, batch_size
        self.model = CrossEncoder(path)

    def score(self, queries: list[str], documents: list[str]) -> np.ndarray:
        return np.asarray(self.model.predict(list(zip(queries, documents)), batch_size=self.batch_size), dtype=np.float32)


class SparseTeacher:
    """A SPLADE SparseEncoder: the dot product of the query's and the document's sparse vectors, each distinct text
    encoded once, as the model's own encode_query / encode_document would (with `encode_sparse`)."""

    def __init__(self, model, name: str, batch_size: int = 64):
        self.model, self.name, self.batch_size = model, name, batch_size

    def score(self, queries: list[str], documents: list[str]) -> np.ndarray:
        (query_texts, query_rows), (document_texts, document_rows) = distinct(queries), distinct(documents)
        pairs_queries = encode_sparse(self.model, query_texts, "query", self.batch_size)[query_rows]
        pairs_documents = encode_sparse(self.model, document_texts, "document", self.batch_size)[document_rows]
        return np.asarray(pairs_queries.multiply(pairs_documents).sum(axis=1), dtype=np.float32).ravel()


class BM25Teacher:
    """BM25 over the training corpus: lexical matching, a teacher that costs nothing to run. Its index is built when
    it first scores, so under `accelerate launch` only the process that scores (the main one) holds it: about 10 GB at
    its peak while it builds at MS MARCO's 8.8M passages, scaling the scale benchmark's 1M figure (the corpus, opened
    from the cache, is not counted in it); every process used to build its own."""

    name = BM25_TEACHER

    def __init__(self, corpus: Mapping[str, str]):
        self.corpus = corpus
        self._retriever: BM25Retriever | None = None
        self._rows: RowsByText | None = None

    def index(self) -> BM25Retriever:
        """The index of the corpus, built at the first call."""
        if self._retriever is None:
            retriever = BM25Retriever(show_progress_bar=False)
            retriever.index(self.corpus)
            self._rows = RowsByText(self.corpus)
            self._retriever = retriever
        return self._retriever

    @property
    def is_indexed(self) -> bool:
        return self._retriever is not None

    def score(self, queries: list[str], documents: list[str]) -> np.ndarray:
        """The BM25 score of each (query, document) pair, scored as a pair: no corpus-length vector is made, so
        memory and time follow the pairs and their terms' postings, not the corpus (one corpus-wide score vector
        per query would need 17.6 TB for MS MARCO's 500k training queries over its 8.8M passages)."""
        positions_by_query: dict[str, list[int]] = {}
        for position, query in enumerate(queries):
            positions_by_query.setdefault(query, []).append(position)
        scores = np.empty(len(queries), dtype=np.float32)
        retriever = self.index()
        for query, positions in positions_by_query.items():
            rows = [self._rows[documents[position]] for position in positions]
            scores[positions] = retriever.pair_scores(query, np.asarray(rows))
        return scores


class EnsembleTeacher:
    """The mean of several teachers' standardised scores."""

    def __init__(self, teachers: list):
        self.teachers = teachers
        self.name = " + ".join(teacher.name for teacher in teachers)

    @property
    def models(self) -> list:
        """The sentence-transformers models its teachers encode with (BM25 has none): a distributed run shares their
        encodings among its processes (`common/shared_encoding.py`)."""
        return [teacher.model for teacher in self.teachers if not isinstance(teacher, BM25Teacher)]

    def score(self, queries: list[str], documents: list[str]) -> np.ndarray:
        standardised = []
        for teacher in self.teachers:
            scores = np.asarray(teacher.score(queries, documents), dtype=np.float64)
            standardised.append((scores - scores.mean()) / (scores.std() or 1.0))
        return np.mean(standardised, axis=0).astype(np.float32)


TEACHER_FORMS = (
    "bm25, start (the starting checkpoint), a local SentenceTransformer, SparseEncoder or CrossEncoder folder, or a transformers checkpoint as "
    "sparse:PATH (SPLADE over its masked-LM head) or dense:PATH (nothing is downloaded)"
)


def teacher_kind(spec: str) -> str:
    """'bm25', 'dense', 'sparse' or 'cross-encoder': how the teacher `spec` scores pairs. A folder of
    sentence-transformers is run as what it is; a bare transformers checkpoint has to say how, with the 'sparse:' or
    'dense:' prefix that `training/evaluate.py` reads, since one with an MLM head can be either."""
    if spec == BM25_TEACHER:
        return BM25_TEACHER
    form, path = split_model_spec(spec)
    if not Path(path).is_dir():
        raise InputError(f"--teacher {spec}: no such folder. A teacher is {TEACHER_FORMS}.")
    try:
        kind = model_kind(path)
    except InputError as error:
        raise InputError(f"--teacher {spec}: {error} A teacher is {TEACHER_FORMS}.") from None
    kinds = {"sentence-transformer": "dense", "sparse-encoder": "sparse", "cross-encoder": "cross-encoder"}
    if form == "" and kind in kinds:
        return kinds[kind]
    if form == "sparse" and (kind == "sparse-encoder" or (kind == "transformers" and has_mlm_head(path))):
        return "sparse"
    if form == "dense" and kind in ("sentence-transformer", "transformers"):
        return "dense"
    if kind == "transformers" and form == "":
        raise InputError(
            f"--teacher {spec}: a bare transformers checkpoint, which can score pairs as SPLADE (over its masked-LM "
            f"head) or as a dense model. Say which: --teacher sparse:{path} or --teacher dense:{path}."
        )
    held = "a checkpoint without a masked-LM head" if kind == "transformers" else f"a {kind} model"
    raise InputError(f"--teacher {spec}: {path} holds {held}, which cannot score pairs as {form}. A teacher is {TEACHER_FORMS}.")


def with_start_teacher(specs: list[str], start: str, sparse: bool) -> list[str]:
    """`specs` with `start` (the starting checkpoint) in place of "start", as the student scores: a
    sentence-transformers folder as what it is, a bare checkpoint as the student's family."""
    if START_TEACHER not in specs:
        return specs
    spec = start if model_kind(start) in ("sentence-transformer", "sparse-encoder") else f"{'sparse' if sparse else 'dense'}:{start}"
    return [spec if name == START_TEACHER else name for name in specs]


def check_teacher_specs(specs: list[str]) -> None:
    """Refuse, before anything is written, a teacher that cannot be run."""
    for spec in specs:
        teacher_kind(spec)


def load_teacher(specs: list[str], corpus: Mapping[str, str]) -> EnsembleTeacher:
    teachers = []
    for spec in specs:
        kind = teacher_kind(spec)
        path = split_model_spec(spec)[1]
        if kind == BM25_TEACHER:
            teachers.append(BM25Teacher(corpus))
        elif kind == "cross-encoder":
            teachers.append(CrossEncoderTeacher(path))
        elif kind == "sparse":
            teachers.append(SparseTeacher(load_sparse_encoder(path), path))
        else:
            teachers.append(BiEncoderTeacher(path))
    return EnsembleTeacher(teachers)
