"""Speed of SPLADE document encoding, measured side by side in one process: `encode_sparse` (this package's encoder,
which never builds the [batch, length, vocabulary] logits) against sentence-transformers' `encode_document`, on the
same model and SciFact abstracts, in documents per second and as a fraction of an fp32 matrix multiply's speed
measured in the same rounds. Target: >= 3x sentence-transformers in fp32, with identical vectors (max abs
difference <= 1e-4, same active dimensions).

Model FLOPs count 2 x (the weights of every linear layer, the vocabulary projection included) per real token, the
tokens of padding and the attention scores left out, so the fraction is of useful work.

    python -m benchmarks.sparse_encoding --model ../shared/models/splade-tiny --num_threads 2
"""

import argparse
import json
import statistics
from pathlib import Path

import torch

from benchmarks.harness import interleaved_seconds, limit_threads, markdown_table, ratio_cell
from training.common.models import load_sparse_encoder
from training.common.sparse_encoding import encode_sparse, to_csr

REPO_ROOT = Path(__file__).resolve().parents[1]
# The matrix multiply that stands for the CPU's fp32 peak (m x k x n, as in ../shared/docs/CPU_NOTES.md).
GEMM_SHAPE = (4096, 384, 1536)
GEMM_REPEATS = 10


def abstracts(data_dir: str, count: int) -> list[str]:
    with open(Path(data_dir) / "corpus.jsonl", encoding="utf-8") as lines:
        documents = [json.loads(line) for _, line in zip(range(count), lines)]
    return [f"{document['title']} {document['text']}".strip() for document in documents]


def model_flops(model, texts: list[str]) -> float:
    """Multiply-adds x 2 of the linear layers over every real (non-padding, truncated) token of `texts`."""
    tokens = sum(len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"])
    linear_weights = sum(module.weight.numel() for module in model[0].auto_model.modules() if isinstance(module, torch.nn.Linear))
    return 2.0 * linear_weights * tokens


def gemm() -> None:
    m, k, n = GEMM_SHAPE
    left, right = torch.randn(m, k), torch.randn(k, n)
    for _ in range(GEMM_REPEATS):
        torch.mm(left, right)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(REPO_ROOT.parent / "shared" / "models" / "splade-tiny"))
    parser.add_argument("--data_dir", default=str(REPO_ROOT.parent / "shared" / "data" / "scifact"))
    parser.add_argument("--documents", type=int, default=256, help="Abstracts encoded per round (the corpus's first).")
    parser.add_argument("--max_seq_length", type=int, default=256)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num_threads", type=int, default=2, help="torch threads (pinned, for comparable runs).")
    args = parser.parse_args(argv)
    limit_threads()
    torch.set_num_threads(args.num_threads)

    model = load_sparse_encoder(args.model, max_seq_length=args.max_seq_length)
    texts = abstracts(args.data_dir, args.documents)
    outputs = {}

    def library():
        outputs["library"] = to_csr(model.encode_document(texts, batch_size=args.batch_size, save_to_cpu=True))

    def ours():
        outputs["ours"] = encode_sparse(model, texts, "document", batch_size=args.batch_size)

    seconds = interleaved_seconds(
        {"sentence-transformers encode_document": library, "encode_sparse": ours, "fp32 GEMM": gemm}, args.rounds
    )
    m, k, n = GEMM_SHAPE
    gemm_flops = [2.0 * m * k * n * GEMM_REPEATS / s for s in seconds.pop("fp32 GEMM")]
    flops = model_flops(model, texts)
    reference = seconds["sentence-transformers encode_document"]
    rows = [
        [
            f"`{name}`",
            f"{len(texts) / statistics.median(s):.1f}",
            ratio_cell(reference, s),
            f"{statistics.median(flops / t / g for t, g in zip(s, gemm_flops)):.2f}",
        ]
        for name, s in seconds.items()
    ]
    difference = abs(outputs["ours"] - outputs["library"]).max()
    same_active = ((outputs["ours"] != 0) != (outputs["library"] != 0)).nnz == 0
    print(
        f"\nSPLADE document encoding: {len(texts)} SciFact abstracts, {args.model}, batch {args.batch_size}, max "
        f"{args.max_seq_length} tokens, {flops / len(texts) / 1e9:.2f} model GFLOP per abstract, {args.num_threads} "
        f"threads, {args.rounds} rounds; fp32 GEMM {'x'.join(map(str, GEMM_SHAPE))}: "
        f"{statistics.median(gemm_flops) / 1e9:.0f} GFLOP/s (median)\n"
    )
    print(markdown_table(
        ["encoder", "docs/s (median)", "speed vs sentence-transformers (target >= 3)", "fraction of GEMM speed"], rows
    ))
    print(
        f"\nSame vectors: max abs difference {difference:.2e} (<= 1e-4: {difference <= 1e-4}), same active "
        f"dimensions: {same_active} ({outputs['ours'].getnnz(axis=1).mean():.0f} per abstract)"
    )


if __name__ == "__main__":
    main()
