"""Can contrastive training on crop pairs lift a model on the no-argument chain's own dev split? A plain loop, outside
the pipeline, so that only the data and the learning rate vary: MultipleNegativesRankingLoss (scale 20, in-batch
negatives only), AdamW at a constant learning rate, on the training pairs `training/finetune.py` makes from
Python's bundled documentation by default (one pair of random crops per passage, 10% of passages held out as dev),
either the fixed pairs in turn or fresh crops of the training passages for every batch (Contriever's way).

Every `--eval_every` steps it prints the dev nDCG@10 and the mean pairwise cosine of the dev documents' vectors,
with the norm of their mean vector and the rms spread around it (a collapsed [CLS] is a large mean and no spread).

    python -m benchmarks.crop_pairs --model seed-encoder --steps 500 --fresh_crops
"""

import argparse
import json
import random
import time

import numpy as np
import torch
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

from benchmarks.harness import limit_threads
from training.data.corpus import embedded_corpus_passages
from training.common.models import load_sentence_transformer
from training.evaluation.evaluate import evaluate_retriever
from training.evaluation.retrievers import DenseRetriever
from training.finetuning.data import training_set_from_passages
from training.finetuning.pseudo_queries import random_crop

DEV_FRACTION, SEED = 0.1, 42  # the fine-tuning defaults


def dev_statistics(model, dev) -> dict:
    documents = sorted({doc_id for judged in dev.qrels.values() for doc_id in judged})
    vectors = model.encode_document([dev.corpus[doc_id] for doc_id in documents], convert_to_numpy=True)
    mean = vectors.mean(axis=0)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosines = unit @ unit.T
    count = len(documents)
    return {
        "dev ndcg@10": round(evaluate_retriever(DenseRetriever(model, "model", show_progress_bar=False), dev).metrics["ndcg@10"], 4),
        "mean pairwise cosine": round(float((cosines.sum() - np.trace(cosines)) / (count * (count - 1))), 4),
        "mean vector norm": round(float(np.linalg.norm(mean)), 3),
        "rms spread": round(float(np.sqrt(((vectors - mean) ** 2).sum(axis=1).mean())), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", default="seed-encoder", help="A SEED pretraining folder (or any encoder folder).")
    parser.add_argument("--pooling", default="cls", choices=["cls", "mean"], help="How texts become vectors.")
    parser.add_argument("--learning_rate", type=float, default=5e-4, help="Constant AdamW learning rate.")
    parser.add_argument("--steps", type=int, default=300, help="Training steps.")
    parser.add_argument("--batch_size", type=int, default=32, help="Pairs per step.")
    parser.add_argument("--fresh_crops", action="store_true", help="New crops of the training passages every batch.")
    parser.add_argument("--eval_every", type=int, default=100, help="Steps between dev evaluations.")
    args = parser.parse_args()
    limit_threads()

    passages = embedded_corpus_passages()
    pairs_set = training_set_from_passages(passages, DEV_FRACTION, None, SEED, "python-docs", "bundled documentation")
    pairs = [
        (pairs_set.queries[query_id], pairs_set.corpus[pairs_set.positives(query_id)[0]]) for query_id in pairs_set.queries
    ]
    training_passages = [passages[int(query_id.removeprefix("q"))].split() for query_id in pairs_set.queries]
    rng = random.Random(0)
    rng.shuffle(pairs)
    model = load_sentence_transformer(args.model, pooling=args.pooling)
    print(json.dumps({"step": 0, **dev_statistics(model, pairs_set.dev)}), flush=True)

    loss = MultipleNegativesRankingLoss(model, scale=20.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    started = time.perf_counter()
    model.train()
    for step in range(1, args.steps + 1):
        if args.fresh_crops:
            batch = [(random_crop(words, rng), random_crop(words, rng)) for words in rng.sample(training_passages, args.batch_size)]
        else:
            first = (step - 1) * args.batch_size % len(pairs)
            batch = pairs[first : first + args.batch_size]
        features = [model.preprocess([query for query, _ in batch]), model.preprocess([document for _, document in batch])]
        value = loss(features, None)
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
        if step % args.eval_every == 0 or step == args.steps:
            model.eval()
            print(json.dumps({"step": step, "training loss": round(value.item(), 3), **dev_statistics(model, pairs_set.dev),
                              "seconds": round(time.perf_counter() - started)}), flush=True)
            model.train()


if __name__ == "__main__":
    main()
