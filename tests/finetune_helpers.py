"""What the fine-tuning specifications share: the script, a tiny run's flags, and reading a run's rounds."""

import json
import shutil
from pathlib import Path

import bm25s
import numpy as np
import torch

from evaluation_helpers import read_judgments, write_qrels
from plain_environment import run_in
from training.data.collection import load_collection
from training.finetune import main

REPO_ROOT = Path(__file__).resolve().parents[1]
FINETUNE_SCRIPT = REPO_ROOT / "training" / "finetune.py"

def weights_checksum(model) -> float:
    """Tells models apart without the code under test: any optimizer step changes it."""
    with torch.no_grad():
        return float(sum(parameter.double().sum() for parameter in model.parameters()))


# A few steps of a 2-layer model on short texts, evaluated on the dev split at the end of each round.
TINY_FINETUNE = [
    "--max_seq_length", "64",
    "--per_device_train_batch_size", "8",
    "--per_device_eval_batch_size", "32",
    "--learning_rate", "1e-3",
    "--logging_steps", "1",
    "--dataloader_pin_memory", "false",
    "--seed", "3",
]


def judged_positives(collection_dir) -> dict[str, set[str]]:
    """Each training query's documents judged relevant (relevance above 0)."""
    qrels = load_collection(str(collection_dir), "train").qrels
    return {query: {doc for doc, relevance in judged.items() if relevance > 0} for query, judged in qrels.items()}


def finetune(argv: list) -> int:
    """`python training/finetune.py ARGV`, in this process: 0 on success, 2 on bad input."""
    return main([str(arg) for arg in argv])


def round_dir(output_dir: Path, round_number: int) -> Path:
    """Where a run keeps round N: its examples, checkpoints, dev metrics and model."""
    return output_dir / "finetuning" / f"round-{round_number}"


def standardised(scores) -> np.ndarray:
    """Zero mean, unit variance over all the scores: how each teacher's scores enter distillation."""
    scores = np.asarray(scores, dtype=np.float64)
    return (scores - scores.mean()) / scores.std()


def bm25_scores(collection, examples) -> np.ndarray:
    """BM25 (bm25s' lucene variant, English stopwords: the `bm25` teacher's settings) of each example's positive
    then negatives for its query over `collection`'s corpus, computed here with bm25s directly."""
    bm25 = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    bm25.index(bm25s.tokenize(list(collection.corpus.values()), stopwords="en", return_ids=False, show_progress=False))
    rows = list(collection.corpus)
    scores = []
    for query_id, positive_id, negatives in examples:
        query = bm25s.tokenize([collection.queries[query_id]], stopwords="en", return_ids=False, show_progress=False)[0]
        by_row = bm25.get_scores(query)
        scores.append([by_row[rows.index(doc_id)] for doc_id in (positive_id, *negatives)])
    return np.asarray(scores)


def round_examples(output_dir: Path, round_number: int) -> list[tuple[str, str, list[str]]]:
    """(query id, positive id, negative ids) of every training example of a round."""
    saved = json.loads((round_dir(output_dir, round_number) / "examples.json").read_text())
    return [tuple(example) for example in saved["examples"]]


def assert_drawn_from_ranks(model, collection, examples, low: int, high: int) -> None:
    """Every example's negatives rank between `low` and `high` (exclusive) in `model`'s own ranking of the corpus.
    Tiny models tie often, so a negative's rank is checked through its score: between the scores at those ranks."""
    corpus_ids = list(collection.corpus)
    documents = model.encode(list(collection.corpus.values()), convert_to_tensor=True)
    for query_id, _, negatives in examples:
        query = model.encode([collection.queries[query_id]], convert_to_tensor=True)
        scores = model.similarity(query, documents)[0].to_dense()
        ranked = torch.sort(scores, descending=True).values
        for doc_id in negatives:
            score = scores[corpus_ids.index(doc_id)]
            assert ranked[high - 1] - 1e-5 <= score <= ranked[low] + 1e-5, (query_id, doc_id)


PROBE_TEXTS = ["a query about cells", "another text, longer than the first one"]


def plain_bert_files(folder: Path) -> dict:
    """What the tools that serve embedding models read of a published folder: its transformer's config.json fields
    (model_type, architectures, whether it has an auto_map), its code files, its fast tokenizer and the maximum input
    length text-embeddings-inference reads from sentence_bert_config.json."""
    config = json.loads((folder / "config.json").read_text())
    return {
        "model_type": config["model_type"],
        "architectures": config["architectures"],
        "auto_map": "auto_map" in config,
        "code_files": sorted(str(path.relative_to(folder)) for path in folder.rglob("*.py")),
        "tokenizer.json": (folder / "tokenizer.json").is_file(),
        "max_seq_length": json.loads((folder / "sentence_bert_config.json").read_text()).get("max_seq_length"),
    }


def serve_at(folder: Path, max_seq_length: int) -> None:
    """Make the SentenceTransformer `folder` served at `max_seq_length` tokens (its sentence_bert_config.json): a run
    from it publishes and judges at that length, so a test can make every evaluation cheaper than at the start's own."""
    path = folder / "sentence_bert_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "max_seq_length": max_seq_length}))


def encoded_in_plain_environment(plain_python: Path, model_class: str, folder: Path, cwd: Path) -> dict:
    """Load `folder` as sentence-transformers' `model_class`, without trust_remote_code, in the environment that has no
    seed-encoder (`plain_python`), and encode PROBE_TEXTS: {"class": the transformer's class, "vectors": dense rows}."""
    program = (
        "import importlib.util, json\n"
        "assert importlib.util.find_spec('modeling_seed') is None, 'seed-encoder is importable here'\n"
        f"from sentence_transformers import {model_class}\n"
        f"model = {model_class}({str(folder)!r})\n"
        f"output = model.encode({PROBE_TEXTS!r}, convert_to_tensor=True)\n"
        "output = output.to_dense() if output.is_sparse else output\n"
        "print(json.dumps({'class': type(model[0].auto_model).__name__, 'vectors': output.tolist()}))\n"
    )
    return run_in(plain_python, program, cwd)


def with_dev_split(collection_dir: Path, folder: Path, dev_queries: int) -> Path:
    """A copy of a BEIR folder whose last `dev_queries` training queries (by id) are moved to qrels/dev.tsv."""
    shutil.copytree(collection_dir, folder)
    judgments = read_judgments(folder / "qrels" / "train.tsv")
    dev = set(sorted({query_id for query_id, _, _ in judgments})[-dev_queries:])
    for split, moved in (("train", False), ("dev", True)):
        write_qrels(folder, split, [judgment for judgment in judgments if (judgment[0] in dev) == moved])
    return folder
