"""What the `test_evaluation_*` specifications share: BEIR folders written by hand or cut from SciFact, and ways to
run `training/evaluate.py`.

A run is `evaluate(argv)` (the script's `main`, in this process) or `run_script(argv)` (a real subprocess, for
exit statuses and stderr); both take the same arguments.
"""

import json
import subprocess
import sys
from math import log2
from pathlib import Path

from sentence_transformers import SparseEncoder

from pretrain_helpers import subprocess_env
from training.evaluate import main

REPO_ROOT = Path(__file__).resolve().parents[1]
EVALUATE_SCRIPT = REPO_ROOT / "training" / "evaluate.py"
QRELS_HEADER = "query-id\tcorpus-id\tscore\n"


def evaluate(argv: list) -> int:
    """`python training/evaluate.py ARGV`, in this process: 0 on success, 2 on bad input."""
    return main([str(arg) for arg in argv])


def run_script(argv: list, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EVALUATE_SCRIPT), *map(str, argv)],
        cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=timeout,
    )


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def write_collection(folder: Path, corpus: list[dict], queries: list[dict], qrels: dict[str, list[tuple]]) -> Path:
    """A BEIR-layout folder: `qrels` maps a split to its (query id, document id, relevance) judgments."""
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "corpus.jsonl", corpus)
    write_jsonl(folder / "queries.jsonl", queries)
    for split, judgments in qrels.items():
        write_qrels(folder, split, judgments)
    return folder


def write_qrels(folder: Path, split: str, judgments: list[tuple]) -> None:
    """qrels/<split>.tsv of a BEIR folder: (query id, document id, relevance) judgments."""
    lines = "".join(f"{query_id}\t{document_id}\t{grade}\n" for query_id, document_id, grade in judgments)
    (folder / "qrels" / f"{split}.tsv").write_text(QRELS_HEADER + lines, encoding="utf-8")


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def read_judgments(path: Path) -> list[tuple[str, str, int]]:
    with path.open(encoding="utf-8") as handle:
        rows = [line.rstrip("\n").split("\t") for line in handle][1:]
    return [(query_id, document_id, int(grade)) for query_id, document_id, grade in rows]


def cut_scifact(source: Path, folder: Path, queries_per_split: dict[str, int], other_documents: int) -> Path:
    """A BEIR folder cut from SciFact: per split, its first queries by id (`queries_per_split`), every document
    they judge, and the first `other_documents` other documents by id. The same folder on every call."""
    qrels, judged_documents, kept_queries = {}, set(), set()
    for split, count in queries_per_split.items():
        judgments = read_judgments(source / "qrels" / f"{split}.tsv")
        first = set(sorted({query_id for query_id, _, _ in judgments})[:count])
        qrels[split] = [judgment for judgment in judgments if judgment[0] in first]
        judged_documents |= {document_id for _, document_id, _ in qrels[split]}
        kept_queries |= first
    corpus = sorted(read_jsonl(source / "corpus.jsonl"), key=lambda record: str(record["_id"]))
    others = [record for record in corpus if str(record["_id"]) not in judged_documents][:other_documents]
    kept = [record for record in corpus if str(record["_id"]) in judged_documents] + others
    queries = [record for record in read_jsonl(source / "queries.jsonl") if str(record["_id"]) in kept_queries]
    return write_collection(folder, kept, queries, qrels)


def trec_ndcg_at_10(
    qrels: dict[str, dict[str, int]], query_ids: list[str], document_ids: list[str], scores, positive_only: bool = False
) -> float:
    """nDCG@10 worked out directly (trec_eval's ndcg_cut_10: gain = relevance, discount log2(rank + 1), equal scores
    ranked by document id in reverse), averaged over the queries of `query_ids` from a query x document score
    matrix; with `positive_only`, a document scoring 0 or less is not retrieved. No code of the package is involved."""
    values = []
    for query_id, row in zip(query_ids, scores):
        retrieved = sorted(
            ((float(score), doc) for doc, score in zip(document_ids, row) if score > 0 or not positive_only), reverse=True
        )
        judged = qrels[query_id]
        dcg = sum(judged.get(doc, 0) / log2(rank + 2) for rank, (_, doc) in enumerate(retrieved[:10]))
        ideal = sum(gain / log2(rank + 2) for rank, gain in enumerate(sorted(judged.values(), reverse=True)[:10]))
        values.append(dcg / ideal)
    return sum(values) / len(values)


def brute_force_ndcg_at_10(model, collection) -> float:
    """`model`'s nDCG@10 on `collection` by brute force: every query against every document with numpy (cosine for
    a dense cosine model, dot product otherwise, e.g. SPLADE, whose documents sharing no term with the query are not
    retrieved), then `trec_ndcg_at_10`: the independent figure the retrievers and evaluators must reproduce."""

    def vectors(encode, texts):
        encoded = encode(texts, convert_to_tensor=True)
        encoded = encoded.to_dense() if encoded.is_sparse else encoded
        if getattr(model, "similarity_fn_name", None) == "cosine":
            encoded = encoded / encoded.norm(dim=1, keepdim=True)
        return encoded.double().cpu().numpy()

    queries = vectors(model.encode_query, list(collection.queries.values()))
    documents = vectors(model.encode_document, list(collection.corpus.values()))
    sparse = isinstance(model, SparseEncoder)
    return trec_ndcg_at_10(
        collection.qrels, list(collection.queries), list(collection.corpus), queries @ documents.T, positive_only=sparse
    )
