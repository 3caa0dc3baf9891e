"""Speed of one `--sparse` training step, measured side by side in one process: the model's forward pass pooled by
`tiled_splade_training` (how training/finetune.py trains a SPLADE on the CPU: no [batch, length, vocabulary] logits,
a backward pass through the winning tokens only) against sentence-transformers' own `SpladePooling`, with the
pipeline's default loss (SpladeLoss over in-batch MultipleNegativesRankingLoss, FLOPS weights 5e-5 / 3e-5) and an
AdamW step, on SciFact training triples (query, its judged abstract, another abstract).

Before timing, one step of each with dropout off checks that both compute the same loss and gradients.

    python -m benchmarks.sparse_training_step --model ../shared/models/splade-tiny --num_threads 2
"""

import argparse
import random
import statistics
from pathlib import Path

import torch

from benchmarks.harness import interleaved_seconds, limit_threads, markdown_table, ratio_cell
from training.common.models import load_sparse_encoder
from training.common.sparse_encoding import tiled_splade_training
from training.data.collection import load_collection
from training.finetuning.arguments import FinetuningModelArguments, RecipeArguments
from training.finetuning.losses import SparseRegularisation, build_loss

REPO_ROOT = Path(__file__).resolve().parents[1]


def training_triples(data_dir: str, count: int, seed: int) -> list[list[str]]:
    """[queries, positives, negatives]: `count` training queries, each with a judged abstract and a random other."""
    collection = load_collection(data_dir, "train")
    generator = random.Random(seed)
    document_ids = list(collection.corpus)
    triples = []
    for query_id in generator.sample(sorted(collection.qrels), count):
        positive = next(document for document, grade in collection.qrels[query_id].items() if grade > 0)
        negative = generator.choice([document for document in document_ids if document != positive])
        triples.append([collection.queries[query_id], collection.corpus[positive], collection.corpus[negative]])
    return [list(column) for column in zip(*triples)]


def gradients(model) -> dict[str, torch.Tensor]:
    return {name: parameter.grad.clone() for name, parameter in model.named_parameters() if parameter.grad is not None}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--model", default=str(REPO_ROOT.parent / "shared" / "models" / "splade-tiny"),
        help="A SPLADE to train: a SparseEncoder folder, or a checkpoint with a masked-LM head.",
    )
    parser.add_argument(
        "--data_dir", default=str(REPO_ROOT.parent / "shared" / "data" / "scifact"),
        help="A BEIR-layout folder with qrels/train.tsv: the triples' queries and abstracts.",
    )
    parser.add_argument("--batch_size", type=int, default=32, help="Triples per step (the fine-tuning default).")
    parser.add_argument("--max_seq_length", type=int, default=256, help="Tokens kept per text (the fine-tuning default).")
    parser.add_argument("--rounds", type=int, default=3, help="Steps timed per pooling, interleaved.")
    parser.add_argument("--num_threads", type=int, default=2, help="torch threads (pinned, for comparable runs).")
    parser.add_argument("--seed", type=int, default=0, help="Draws the triples and seeds torch.")
    args = parser.parse_args(argv)
    limit_threads()
    torch.set_num_threads(args.num_threads)
    torch.manual_seed(args.seed)

    model = load_sparse_encoder(args.model, max_seq_length=args.max_seq_length)
    defaults = FinetuningModelArguments(model_name_or_path=args.model, sparse=True)
    loss = build_loss(
        model, RecipeArguments(),
        SparseRegularisation(defaults.query_regularizer_weight, defaults.document_regularizer_weight),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    columns = training_triples(args.data_dir, args.batch_size, args.seed)
    features = [model.preprocess(texts) for texts in columns]

    def step() -> float:
        optimizer.zero_grad()
        parts = loss([dict(column) for column in features], None)  # the ranking loss and each regulariser's
        value = sum(parts.values())  # what the trainer minimises
        value.backward()
        return value.item()

    # The check: dropout off (and SpladePooling in training mode, which avoids its in-place evaluation operations).
    model.eval()
    model[1].train()
    library_loss, library_gradients = step(), gradients(model)
    with tiled_splade_training(model):
        tiled_loss, tiled_gradients = step(), gradients(model)
    worst = max(
        ((tiled_gradients[name] - gradient).abs().max() / gradient.abs().max()).item()
        for name, gradient in library_gradients.items() if gradient.abs().max() > 1e-3  # key biases: rounding only
    )

    model.train()

    def library_step():
        step()
        optimizer.step()

    def tiled_step():
        with tiled_splade_training(model):
            step()
        optimizer.step()

    seconds = interleaved_seconds({"sentence-transformers SpladePooling": library_step, "tiled_splade_training": tiled_step}, args.rounds)
    reference = seconds["sentence-transformers SpladePooling"]
    print(
        f"\nOne --sparse training step: {args.batch_size} SciFact triples, {args.model}, max {args.max_seq_length} "
        f"tokens, {args.num_threads} threads, {args.rounds} rounds\n"
    )
    print(markdown_table(
        ["pooling", "seconds per step (median)", "speed vs sentence-transformers"],
        [[f"`{name}`", f"{statistics.median(s):.2f}", ratio_cell(reference, s)] for name, s in seconds.items()],
    ))
    print(
        f"\nSame step (dropout off): loss {library_loss:.6f} vs {tiled_loss:.6f}; largest gradient difference "
        f"{worst:.1e} of the parameter's largest gradient"
    )


if __name__ == "__main__":
    main()
