"""Retrievers: each indexes a corpus once and returns a run (query id -> {document id: score}) for queries."""

from .base import Retriever, Run
from .bm25 import BM25Retriever
from .dense import DenseRetriever
from .hybrid import HybridRetriever
from .sparse import SparseRetriever

__all__ = ["Retriever", "Run", "BM25Retriever", "DenseRetriever", "SparseRetriever", "HybridRetriever"]
