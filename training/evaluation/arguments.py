"""Command-line arguments of `training/evaluate.py` (parsed by `training.common.cli.ArgumentParser`)."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import bm25s
import Stemmer

from ..common.errors import InputError
from ..common.output_dir import check_writable_file, check_writable_folder
from .embedding_cache import cache_dir_or_none, default_cache_dir
from .metrics import DEFAULT_METRICS

DEEPEST_CUTOFF = max(int(metric.split("@")[1]) for metric in DEFAULT_METRICS)
NONE = "none"


@dataclass
class EvaluationArguments:
    retrievers: list[str] = field(
        metadata={
            "positional": True,
            "metavar": "RETRIEVER",
            "help": "One or more retrievers, each a row of the table: 'bm25'; a model folder (a SentenceTransformer "
            "folder keeps its pooling; a SEED pretraining or other BERT-family checkpoint gets --pooling; a "
            "SparseEncoder folder is searched as sparse); 'dense:PATH' or 'sparse:PATH' to say which (sparse:PATH "
            "builds SPLADE over the MLM head of e.g. a SEED pretraining folder); 'hybrid:A+B[+C]' to fuse the runs "
            "of the listed retrievers (any of the above forms).",
        }
    )
    data_dir: str = field(
        metadata={"help": "A BEIR-layout folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv."}
    )
    split: str = field(default="test", metadata={"help": "The qrels split to evaluate (qrels/<split>.tsv)."})
    top_k: int = field(
        default=DEEPEST_CUTOFF,
        metadata={"help": f"Documents retrieved per query (at least {DEEPEST_CUTOFF}, the deepest metric cutoff)."},
    )
    output_json: str | None = field(
        default=None, metadata={"help": "Write every retriever's metrics, timings and settings to this JSON file."}
    )
    save_runs: str | None = field(
        default=None, metadata={"help": "Write each retriever's run to this folder as a TREC run file (N-name.trec)."}
    )
    pooling: Literal["cls", "mean", "max"] | None = field(
        default=None,
        metadata={
            "help": "Pooling of dense models: a bare checkpoint gets this (default cls, as in the SEED paper); a "
            "SentenceTransformer folder keeps its own unless this is given."
        },
    )
    max_seq_length: int | None = field(
        default=None, metadata={"help": "Truncate texts to this many tokens (default: each model's own setting)."}
    )
    batch_size: int = field(default=32, metadata={"help": "Texts per batch when encoding with a model."})
    cache_dir: str | None = field(
        default_factory=default_cache_dir,
        metadata={
            "help": "Where corpus embeddings (dense and sparse) are cached, keyed by the model's weights, tokenizer and "
            "modules and the corpus; training/finetune.py keeps its encodings there too, so the same weights never "
            "encode the same corpus twice (default: $XDG_CACHE_HOME or ~/.cache, then seed-encoder/embeddings); 'none' "
            "keeps nothing and encodes every corpus afresh."
        },
    )
    embedding_dtype: Literal["float32", "float16"] = field(
        default="float32",
        metadata={
            "help": "How dense corpus embeddings are stored, in the cache and in memory before indexing: float16 "
            "halves the cache file and the pages read from it (its effect on nDCG@10 is in docs/evaluation.md); they "
            "are searched as float32 either way. Sparse models keep float32 CSR matrices."
        },
    )
    bm25_k1: float = field(default=1.5, metadata={"help": "BM25 k1 (term-frequency saturation)."})
    bm25_b: float = field(default=0.75, metadata={"help": "BM25 b (document-length normalisation, 0 to 1)."})
    bm25_method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = field(
        default="lucene", metadata={"help": "The BM25 variant (bm25s' method)."}
    )
    bm25_stopwords: str = field(
        default="en", metadata={"help": "Stopwords removed by BM25: a language bm25s knows (en, de, fr, ...) or 'none'."}
    )
    bm25_stemmer: str = field(
        default=NONE, metadata={"help": "PyStemmer algorithm for BM25 (e.g. 'english'), or 'none' for no stemming."}
    )
    fusion: Literal["rrf", "score_sum"] = field(
        default="rrf",
        metadata={
            "help": "How hybrids fuse runs: 'rrf' (reciprocal rank fusion, k=60) or 'score_sum' (min-max normalised "
            "scores, summed with equal weights)."
        },
    )
    fusion_tune_split: str | None = field(
        default=None,
        metadata={
            "help": "Tune the hybrids' fusion (rrf: k; score_sum: weights) for nDCG@10 on this split of --data_dir "
            "before evaluating on --split (e.g. 'dev' or 'train'; never the evaluated split)."
        },
    )
    skip_unknown_ids: bool = field(
        default=False,
        metadata={"help": "Leave out qrels lines whose query or document id does not exist (default: stop with an error)."},
    )

    def __post_init__(self):
        if self.top_k < DEEPEST_CUTOFF:
            raise InputError(f"--top_k {self.top_k}: must be at least {DEEPEST_CUTOFF}, the deepest metric cutoff.")
        if self.batch_size < 1:
            raise InputError(f"--batch_size {self.batch_size}: must be at least 1.")
        if self.max_seq_length is not None and self.max_seq_length < 3:
            raise InputError(f"--max_seq_length {self.max_seq_length}: needs room for [CLS], a token and [SEP].")
        self.cache_dir = cache_dir_or_none(self.cache_dir)
        if self.bm25_k1 < 0 or not 0 <= self.bm25_b <= 1:
            raise InputError(f"--bm25_k1 {self.bm25_k1} --bm25_b {self.bm25_b}: k1 must be >= 0 and b within [0, 1].")
        self._check_bm25_text_processing()
        self._check_outputs()
        if self.fusion_tune_split is not None:
            if not any(spec.startswith("hybrid:") for spec in self.retrievers):
                raise InputError(f"--fusion_tune_split {self.fusion_tune_split}: no hybrid: retriever to tune.")
            if self.fusion_tune_split == self.split:
                raise InputError(
                    f"--fusion_tune_split {self.fusion_tune_split}: the evaluated split itself; tune on another split."
                )

    def _check_bm25_text_processing(self):
        self.bm25_stopwords = None if self.bm25_stopwords.lower() == NONE else self.bm25_stopwords
        self.bm25_stemmer = None if self.bm25_stemmer.lower() == NONE else self.bm25_stemmer
        try:
            bm25s.tokenization.Tokenizer(stopwords=self.bm25_stopwords)
        except ValueError:
            raise InputError(
                f"--bm25_stopwords {self.bm25_stopwords}: not a stopword list bm25s has (en, de, nl, fr, es, pt, it, "
                "ru, sv, no, zh, tr, ko, da) nor 'none'."
            ) from None
        if self.bm25_stemmer is not None and self.bm25_stemmer not in Stemmer.algorithms():
            raise InputError(
                f"--bm25_stemmer {self.bm25_stemmer}: not a PyStemmer algorithm ({', '.join(Stemmer.algorithms())}) "
                "nor 'none'."
            )

    def _check_outputs(self):
        """Refuse outputs that cannot be written before any work is done."""
        if self.output_json is not None:
            path = Path(self.output_json)
            if path.is_dir() or not path.parent.is_dir():
                raise InputError(
                    f"--output_json {path}: {'is a folder' if path.is_dir() else 'its folder does not exist'}; "
                    "give a file path in an existing folder."
                )
            check_writable_file(path, "--output_json")
        if self.save_runs is not None and Path(self.save_runs).exists() and not Path(self.save_runs).is_dir():
            raise InputError(f"--save_runs {self.save_runs}: a file, not a folder; give a folder for the run files.")
        if self.save_runs is not None:
            check_writable_folder(Path(self.save_runs), "--save_runs")
