"""The scale benchmark's synthetic collections, made from the shared data: N passages of 3 to 6 real sentences drawn
with a seed, each with a distinct id, so that BM25 sees varied text; each query is the first sentence of a passage,
its judged document (qrels/test.tsv)."""

import json
from pathlib import Path

import numpy as np


def sentence_pool(data_dir: Path) -> list[str]:
    """Real sentences: SciFact's abstracts split at full stops, and lines of the shared English prose."""
    sentences = []
    for line in (data_dir / "scifact" / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        sentences += [part.strip() for part in json.loads(line)["text"].split(". ") if len(part.split()) >= 5]
    for path in sorted((data_dir / "pretrain_text").glob("*.txt")):
        sentences += [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if len(line.split()) >= 8]
    return sentences


def write_collection(folder: Path, passages: int, queries: int, pool: list[str], seed: int = 0) -> Path:
    """A BEIR folder of `passages` passages and `queries` queries (qrels/test.tsv), written once."""
    if (folder / "qrels" / "test.tsv").is_file():
        return folder
    rng = np.random.default_rng(seed)
    staging = folder.with_name(folder.name + ".incomplete")
    (staging / "qrels").mkdir(parents=True, exist_ok=True)
    lengths = rng.integers(3, 7, size=passages)
    first_sentences = []
    with (staging / "corpus.jsonl").open("w", encoding="utf-8") as corpus:
        for number, length in enumerate(lengths):
            picked = rng.integers(0, len(pool), size=length)
            first_sentences.append(int(picked[0]))
            text = ". ".join(pool[index] for index in picked)
            corpus.write(json.dumps({"_id": f"p{number}", "title": "", "text": text}) + "\n")
    judged = rng.choice(passages, size=queries, replace=queries > passages)
    with (staging / "queries.jsonl").open("w", encoding="utf-8") as query_file, \
            (staging / "qrels" / "test.tsv").open("w", encoding="utf-8") as qrels:
        qrels.write("query-id\tcorpus-id\tscore\n")
        for number, passage in enumerate(judged):
            query_file.write(json.dumps({"_id": f"q{number}", "text": pool[first_sentences[passage]]}) + "\n")
            qrels.write(f"q{number}\tp{passage}\t1\n")
    staging.rename(folder)
    return folder
