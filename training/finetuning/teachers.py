"""Distillation teachers: what scores a (query, document) pair, and the ensemble of several.

A teacher may differ from the student in tokenizer and size: it sees only texts. Each teacher's
scores are standardised over all the pairs it scored (zero mean, unit variance) before an
ensemble averages them, as SPLADE++'s EnsembleDistil combines teachers on different scales.
"""

from pathlib import Path

import numpy as np

from ..common.errors import InputError
from ..common.models import load_sentence_transformer, model_kind
from ..evaluation.retrievers import BM25Retriever

BM25_TEACHER = "bm25"


class BiEncoderTeacher:
    """A SentenceTransformer: the similarity of the query's and the document's embeddings."""

    def __init__(self, path: str, batch_size: int = 64):
        self.name, self.batch_size = path, batch_size
        self.model = load_sentence_transformer(path)

    def score(self, queries: list[str], documents: list[str]) -> np.ndarray:
        query_embeddings = self.model.encode(queries, batch_size=self.batch_size, convert_to_tensor=True)
        document_embeddings = self.model.encode(documents, batch_size=self.batch_size, convert_to_tensor=True)
        return self.model.similarity_pairwise(query_embeddings, document_embeddings).float().cpu().numpy()


class CrossEncoderTeacher:
    """A CrossEncoder: its relevance score of the (query, document) pair read together."""

    def __init__(self, path: str, batch_size: int = 64):
        from sentence_transformers import CrossEncoder

        self.name, self.batch_size = path, batch_size
        self.model = CrossEncoder(path)

    def score(self, queries: list[str], documents: list[str]) -> np.ndarray:
        return np.asarray(self.model.predict(list(zip(queries, documents)), batch_size=self.batch_size), dtype=np.float32)


class BM25Teacher:
    """BM25 over the training corpus: lexical matching, a teacher that costs nothing to run."""

    name = BM25_TEACHER

    def __init__(self, corpus: dict[str, str]):
        self.retriever = BM25Retriever(show_progress_bar=False)
        self.retriever.index(corpus)
        self.rows = {text: row for row, text in enumerate(corpus.values())}

    def score(self, queries: list[str], documents: list[str]) -> np.ndarray:
        scores_by_query = {query: self.retriever.scores(query) for query in dict.fromkeys(queries)}
        return np.array([scores_by_query[query][self.rows[text]] for query, text in zip(queries, documents)])


class EnsembleTeacher:
    """The mean of several teachers' standardised scores."""

    def __init__(self, teachers: list):
        self.teachers = teachers
        self.name = " + ".join(teacher.name for teacher in teachers)

    def score(self, queries: list[str], documents: list[str]) -> np.ndarray:
        standardised = []
        for teacher in self.teachers:
            scores = np.asarray(teacher.score(queries, documents), dtype=np.float64)
            standardised.append((scores - scores.mean()) / (scores.std() or 1.0))
        return np.mean(standardised, axis=0).astype(np.float32)


def check_teacher_specs(specs: list[str]) -> None:
    """Refuse, before anything is written, a teacher that is neither bm25 nor a folder holding a model."""
    for spec in specs:
        if spec == BM25_TEACHER:
            continue
        if not Path(spec).is_dir():
            raise InputError(
                f"--teacher {spec}: no such folder. A teacher is bm25 or a local SentenceTransformer or CrossEncoder "
                "folder (nothing is downloaded)."
            )
        try:
            kind = model_kind(spec)
        except InputError:
            kind = None
        if kind not in ("sentence-transformer", "cross-encoder"):
            raise InputError(
                f"--teacher {spec}: the folder holds no SentenceTransformer or CrossEncoder model (no modules.json or "
                "cross-encoder config). Pass a folder written by SentenceTransformer.save or CrossEncoder.save, or bm25."
            )


def load_teacher(specs: list[str], corpus: dict[str, str]) -> EnsembleTeacher:
    teachers = []
    for spec in specs:
        if spec == BM25_TEACHER:
            teachers.append(BM25Teacher(corpus))
        elif model_kind(spec) == "cross-encoder":
            teachers.append(CrossEncoderTeacher(spec))
        else:
            teachers.append(BiEncoderTeacher(spec))
    return EnsembleTeacher(teachers)
