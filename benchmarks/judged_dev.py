"""How many judged queries the keep-or-publish guard needs: a label-free run's round against its start, judged on
small random draws of real dev queries, against what the test split says.

For each size n, `--draws` random sets of n queries of `--pool_split` (never the test split) judge the round against
the start with the run's own rule (`training/finetuning/starts.py`: publish only where the lower end of a 95% paired
bootstrap interval of the gain is above zero) and with the rule it replaced (publish where the mean rose). A decision
is right where it agrees with `--test_split`: publish where the round scores higher there, keep the start otherwise.
Beside them, the decision the run's own pseudo-dev made under each rule (read from its output folder).

Both models are evaluated at the length the run published at (the start's own), as a user serves them.

    python -m benchmarks.judged_dev --data_dir ../shared/data/scifact --start $MINILM --run scifact-pseudo-labels
"""

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.harness import markdown_table
from training.common.models import load_sentence_transformer
from training.data.collection import load_collection
from training.evaluation.embedding_cache import default_cache_dir
from training.evaluation.evaluator import RetrievalEvaluator
from training.finetuning.run_folder import FinetuningRun
from training.finetuning.starts import gain_interval

SIZES = (10, 25, 50, 100, 200, 400)


def per_query_scores(model, data_dir: str, split: str, max_seq_length: int) -> dict[str, float]:
    """nDCG@10 of each judged query of the split, the model truncating at `max_seq_length` tokens."""
    evaluator = RetrievalEvaluator(
        load_collection(data_dir, split), name=split, show_progress_bar=True, cache_dir=default_cache_dir(),
        max_seq_length=max_seq_length,
    )
    evaluator(model)
    return evaluator.per_query


def decisions(round_scores: dict, start_scores: dict) -> dict[str, bool]:
    """Whether each rule publishes the round: the bootstrap guard, and the means alone."""
    low, _ = gain_interval(round_scores, start_scores)
    gain = np.mean(list(round_scores.values())) - np.mean(list(start_scores.values()))
    return {"guard": low > 0, "means": bool(gain > 0)}


def agreement(pool_round: dict, pool_start: dict, publish_is_right: bool, size: int, draws: int, seed: int) -> dict:
    """The share of `draws` random sets of `size` pool queries on which each rule decides as the test split does."""
    rng = np.random.default_rng(seed)
    queries = sorted(pool_start)
    right = {"guard": 0, "means": 0}
    published = {"guard": 0, "means": 0}
    for _ in range(draws):
        drawn = rng.choice(queries, size=size, replace=False)
        decided = decisions({q: pool_round[q] for q in drawn}, {q: pool_start[q] for q in drawn})
        for rule, publish in decided.items():
            right[rule] += publish == publish_is_right
            published[rule] += publish
    return {f"{rule}_{what}": count / draws for what, counts in (("right", right), ("published", published))
            for rule, count in counts.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", required=True, help="BEIR-layout collection with the pool and test splits.")
    parser.add_argument("--pool_split", default="train", help="Judged queries the draws come from (default: train).")
    parser.add_argument("--test_split", default="test", help="The split whose verdict a decision must agree with.")
    parser.add_argument("--start", required=True, help="The run's start (--model_name_or_path).")
    parser.add_argument("--run", required=True, help="The label-free run's output folder (its round 1 is judged).")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="Numbers of judged queries to draw.")
    parser.add_argument("--draws", type=int, default=1000, help="Random sets of queries per size.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the draws.")
    parser.add_argument("--output_json", help="Also write the results here.")
    args = parser.parse_args(argv)

    run = Path(args.run)
    length = json.loads((run / "sentence_bert_config.json").read_text())["max_seq_length"]
    start = load_sentence_transformer(args.start)
    finetuning = FinetuningRun(run)
    trained = load_sentence_transformer(str(finetuning.round(1).model_dir))
    scores = {
        (name, split): per_query_scores(model, args.data_dir, split, length)
        for name, model in (("start", start), ("round", trained)) for split in (args.pool_split, args.test_split)
    }
    test_gain = float(np.mean(list(scores["round", args.test_split].values()))
                      - np.mean(list(scores["start", args.test_split].values())))
    publish_is_right = test_gain > 0
    pseudo_dev = decisions(
        finetuning.round(1).dev_per_query(), finetuning.start_dev_per_query,
    )
    pool_round, pool_start = scores["round", args.pool_split], scores["start", args.pool_split]
    pool_gain = float(np.mean(list(pool_round.values())) - np.mean(list(pool_start.values())))
    pool_interval = gain_interval(pool_round, pool_start)
    rows, results = [], {
        "test_gain": test_gain, "published_length": length, "pseudo_dev": pseudo_dev, "sizes": {},
        "pool_gain": pool_gain, "pool_interval": list(pool_interval), "pool_queries": len(pool_start),
    }
    for size in args.sizes:
        found = agreement(scores["round", args.pool_split], scores["start", args.pool_split], publish_is_right, size,
                          args.draws, args.seed)
        results["sizes"][size] = found
        rows.append([size, f"{found['guard_right']:.1%}", f"{found['guard_published']:.1%}",
                     f"{found['means_right']:.1%}", f"{found['means_published']:.1%}"])
    print(f"round 1 on {args.test_split}: {test_gain:+.4f} nDCG@10 over the start at {length} tokens, so the right "
          f"decision is to {'publish' if publish_is_right else 'keep the start'}; the run's pseudo-dev decided "
          f"{'publish' if pseudo_dev['guard'] else 'keep'} (guard) / {'publish' if pseudo_dev['means'] else 'keep'} (means)")
    print(f"on all {len(pool_start)} {args.pool_split} queries: {pool_gain:+.4f} "
          f"[{pool_interval[0]:+.4f}, {pool_interval[1]:+.4f}]")
    print(markdown_table(
        ["judged queries", "guard right", "guard published", "means right", "means published"], rows
    ))
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
