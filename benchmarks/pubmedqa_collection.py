"""A BEIR-layout retrieval collection built from PubMedQA question -> abstract pairs: the questions are the queries,
the abstracts the corpus, and each question judges its own abstract relevant. The test split is fixed: a seeded
shuffle of the pairs (sorted by PubMed id first, so the file's order does not matter) puts the first half in
qrels/test.tsv (500 queries of the 1,000 pairs) and the rest in qrels/train.tsv (the few-shot queries).

    python -m benchmarks.pubmedqa_collection ../shared/data/pubmedqa/pairs.jsonl pubmedqa
"""

import argparse
import json
import random
import shutil
import sys
from pathlib import Path

from training.common.cli import exit_status
from training.common.errors import InputError
from training.common.json_lines import json_lines

TEST_FRACTION = 0.5
SPLIT_SEED = 0  # the split is part of the collection, never of a benchmark's seeds
FIELDS = ("pmid", "query", "positive")


def read_pairs(path: Path) -> list[dict]:
    """The pairs of a PubMedQA pairs file, each checked to have a PubMed id, a question and an abstract."""
    hint = f"Each line of a PubMedQA pairs file is a JSON object with {', '.join(FIELDS)} (strings)."
    pairs, seen = [], set()
    for line_number, record in json_lines(path, required=FIELDS, hint=hint, argument="--pubmedqa_pairs"):
        empty = [field for field in FIELDS if not isinstance(record[field], str) or not record[field].strip()]
        if empty:
            raise InputError(f"--pubmedqa_pairs {path}, line {line_number}: {', '.join(empty)} empty or not text. {hint}")
        if record["pmid"] in seen:
            raise InputError(f"--pubmedqa_pairs {path}, line {line_number}: PubMed id {record['pmid']} appears twice.")
        seen.add(record["pmid"])
        pairs.append(record)
    return pairs


def build_pubmedqa_collection(pairs_path: Path, output_dir: Path, test_fraction: float = TEST_FRACTION) -> Path:
    """Write the collection to `output_dir` (which must not exist yet), staged so that it appears whole."""
    pairs = sorted(read_pairs(Path(pairs_path)), key=lambda pair: pair["pmid"])
    test_queries = round(len(pairs) * test_fraction)
    if not 0 < test_queries < len(pairs):
        raise InputError(f"--pubmedqa_pairs {pairs_path}: {len(pairs)} pairs, too few for a test and a train split.")
    random.Random(SPLIT_SEED).shuffle(pairs)
    output_dir = Path(output_dir)
    if output_dir.exists():
        raise InputError(f"{output_dir}: already exists; choose a new folder.")
    staged = output_dir.with_name(output_dir.name + ".partial")
    shutil.rmtree(staged, ignore_errors=True)
    (staged / "qrels").mkdir(parents=True)
    with open(staged / "corpus.jsonl", "w", encoding="utf-8") as corpus, open(staged / "queries.jsonl", "w", encoding="utf-8") as queries:
        for pair in pairs:
            corpus.write(json.dumps({"_id": pair["pmid"], "title": "", "text": pair["positive"]}) + "\n")
            queries.write(json.dumps({"_id": f"q{pair['pmid']}", "text": pair["query"]}) + "\n")
    for split, members in (("test", pairs[:test_queries]), ("train", pairs[test_queries:])):
        lines = ["query-id\tcorpus-id\tscore"] + [f"q{pair['pmid']}\t{pair['pmid']}\t1" for pair in members]
        (staged / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    staged.replace(output_dir)
    return output_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pairs", type=Path, help="PubMedQA pairs, JSON lines with pmid, query and positive.")
    parser.add_argument("output_dir", type=Path, help="The new BEIR folder (corpus.jsonl, queries.jsonl, qrels/).")
    args = parser.parse_args(argv)
    return exit_status(lambda: f"Wrote {build_pubmedqa_collection(args.pairs, args.output_dir)}")


if __name__ == "__main__":
    sys.exit(main())
