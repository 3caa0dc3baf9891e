"""Serving without PyTorch: documents a second of torch (this package's encoder: sentence-transformers for a dense
model, the tiled `encode_sparse` for SPLADE), the ONNX export in fp32 and its int8 quantisation, side by side in one
process on the same cores; the largest difference of each ONNX model's vectors from torch's; nDCG@10 of each on the
collection's test split, the whole corpus encoded by each.

Speed is measured on the corpus's first `--documents` abstracts, the three encoders taking turns within each of
`--rounds` rounds; torch and onnxruntime each get `--num_threads` threads. The models are exported into a temporary
folder first (`training/export.py --onnx --quantize int8`).

    python -m benchmarks.onnx_serving --dense $MINILM --sparse sparse:../shared/models/splade-tiny \\
        --data_dir ../shared/data/scifact
"""

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch
from scipy import sparse as scipy_sparse
from sentence_transformers import SparseEncoder

from benchmarks.harness import interleaved_seconds, limit_threads, markdown_table, ratio_cell
from training.common.sparse_encoding import encode_sparse
from training.data.collection import load_collection
from training.evaluation.metrics import compute_metrics
from training.evaluation.retrievers.sparse import top_k_rows
from training.onnx_serving.encoder import OnnxEncoder
from training.onnx_serving.export import export_onnx, load_retriever, vector_width

TOP_K = 100


def torch_encoder(model, sparse: bool):
    """(encode_query, encode_document) of the model in torch: dense arrays, or CSR rows for SPLADE."""
    if sparse:
        return (
            lambda texts, batch_size: encode_sparse(model, texts, "query", batch_size),
            lambda texts, batch_size: encode_sparse(model, texts, "document", batch_size),
        )
    return (
        lambda texts, batch_size: model.encode_query(texts, batch_size=batch_size, convert_to_numpy=True),
        lambda texts, batch_size: model.encode_document(texts, batch_size=batch_size, convert_to_numpy=True),
    )


def onnx_encoder(folder: Path, quantized: bool, threads: int, width: int, sparse: bool):
    """(encode_query, encode_document) of the exported graph, in the same form as `torch_encoder`'s."""
    encoder = OnnxEncoder(folder, quantized=quantized, threads=threads)

    def as_rows(vectors):
        if not sparse:
            return vectors
        indptr = np.cumsum([0] + [len(indices) for indices, _ in vectors])
        indices = np.concatenate([indices for indices, _ in vectors]) if vectors else np.zeros(0, dtype=int)
        weights = np.concatenate([weights for _, weights in vectors]) if vectors else np.zeros(0, dtype=np.float32)
        return scipy_sparse.csr_matrix((weights, indices, indptr), shape=(len(vectors), width))

    return (
        lambda texts, batch_size: as_rows(encoder.encode_query(texts, batch_size)),
        lambda texts, batch_size: as_rows(encoder.encode_document(texts, batch_size)),
    )


def ndcg_at_10(queries, documents, collection) -> float:
    """nDCG@10 of exact search: every query's dot product with every document, the best TOP_K kept."""
    scores = queries @ documents.T
    scores = scores.toarray() if scipy_sparse.issparse(scores) else scores
    columns, best = top_k_rows(np.asarray(scores, dtype=np.float32), TOP_K)
    document_ids, query_ids = list(collection.corpus), list(collection.queries)
    run = {
        query_id: {document_ids[column]: float(score) for column, score in zip(columns[row], best[row])}
        for row, query_id in enumerate(query_ids)
    }
    return compute_metrics(collection.qrels, run, ("ndcg@10",))["ndcg@10"]


def largest_difference(left, right) -> float:
    difference = left - right
    return float(abs(difference).max()) if scipy_sparse.issparse(difference) else float(np.abs(difference).max())


def measure(spec: str, folder: Path, collection, args) -> tuple[list[list], str]:
    """The table rows of one model (torch, ONNX fp32, ONNX int8) and a line on its set-up."""
    model = load_retriever(spec)
    sparse = isinstance(model, SparseEncoder)
    width = vector_width(model)
    encoders = {
        "torch": torch_encoder(model, sparse),
        "ONNX fp32": onnx_encoder(folder, False, args.num_threads, width, sparse),
        "ONNX int8": onnx_encoder(folder, True, args.num_threads, width, sparse),
    }
    # Each at its own best batch: torch's tiled SPLADE encoder at --batch_size like a dense model; the ONNX SPLADE
    # graph, which holds [batch, length, vocabulary] logits, at --sparse_batch_size.
    onnx_batch_size = args.sparse_batch_size if sparse else args.batch_size
    batch_sizes = {name: args.batch_size if name == "torch" else onnx_batch_size for name in encoders}
    corpus = list(collection.corpus.values())
    sample = corpus[: args.documents]
    seconds = interleaved_seconds(
        {name: (lambda name=name, encode=encode: encode[1](sample, batch_sizes[name])) for name, encode in encoders.items()},
        args.rounds,
    )
    queries, documents = {}, {}
    for name, (encode_query, encode_document) in encoders.items():
        queries[name] = encode_query(list(collection.queries.values()), batch_sizes[name])
        documents[name] = encode_document(corpus, batch_sizes[name])
    rows = []
    for name in encoders:
        rows.append([
            f"{'sparse' if sparse else 'dense'} {name}",
            f"{len(sample) / statistics.median(seconds[name]):.1f}",
            ratio_cell(seconds["torch"], seconds[name]),
            "-" if name == "torch" else f"{largest_difference(documents[name], documents['torch']):.1e}",
            f"{ndcg_at_10(queries[name], documents[name], collection):.4f}",
        ])
    setup = (
        f"{spec}: batch {args.batch_size} (torch) and {onnx_batch_size} (ONNX), max {model.max_seq_length} tokens, "
        f"{args.num_threads} threads, "
        f"{len(sample)} abstracts x {args.rounds} rounds for speed, {len(corpus)} documents and "
        f"{len(collection.queries)} queries for nDCG@10"
    )
    return rows, setup


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dense", help="A dense retriever (a SentenceTransformer folder).")
    parser.add_argument("--sparse", help="A SPLADE retriever (a SparseEncoder folder, or sparse:PATH).")
    parser.add_argument("--data_dir", required=True, help="BEIR-layout collection (its corpus and --split).")
    parser.add_argument("--split", default="test", help="The judged split nDCG@10 is measured on (default: test).")
    parser.add_argument("--documents", type=int, default=256, help="Abstracts encoded per round for speed.")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds of the speed measurement.")
    parser.add_argument("--batch_size", type=int, default=32,
                        help="Batch size of torch, and of ONNX for a dense model (default: 32).")
    parser.add_argument("--sparse_batch_size", type=int, default=4,
                        help="The ONNX SPLADE graph's batch size (default: 4, the loader's, fastest for a graph that "
                             "holds [batch, length, vocabulary] logits; torch's SPLADE encoder takes --batch_size).")
    parser.add_argument("--num_threads", type=int, default=2, help="torch and onnxruntime threads.")
    args = parser.parse_args(argv)
    limit_threads()
    torch.set_num_threads(args.num_threads)

    collection = load_collection(args.data_dir, args.split)
    rows, setups = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for spec in filter(None, (args.dense, args.sparse)):
            folder = Path(scratch) / f"onnx-{len(setups)}"
            export_onnx(spec, str(folder), quantize="int8")
            model_rows, setup = measure(spec, folder, collection, args)
            rows += model_rows
            setups.append(setup)
            print(setup, markdown_table(["model", "docs/s", "speed vs torch", "max abs difference", "nDCG@10"], model_rows),
                  sep="\n", flush=True)  # each model's figures as soon as they are measured
    print("\n".join(setups) + "\n")
    print(markdown_table(
        ["model", "docs/s (median)", "speed vs torch", "max abs difference from torch", f"nDCG@10 ({args.split})"],
        rows,
    ))


if __name__ == "__main__":
    main()
