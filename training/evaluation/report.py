"""What an evaluation leaves behind: a markdown table, a JSON file and TREC run files."""

import json
import re
from dataclasses import asdict
from pathlib import Path

from ranx import Run as RanxRun

from ..data.collection import Collection
from .evaluate import EvaluationResult

METRIC_NAMES = {"ndcg": "nDCG", "mrr": "MRR", "recall": "Recall", "precision": "P", "map": "MAP"}
# Extra columns, shown when some retriever reports them: (stat, header, format).
STAT_COLUMNS = (
    ("query_active_dims", "query dims", "{:,.0f}"),
    ("document_active_dims", "doc dims", "{:,.0f}"),
    ("flops", "FLOPS", "{:,.1f}"),
)


def _metric_header(metric: str) -> str:
    name, _, cutoff = metric.partition("@")
    return f"{METRIC_NAMES.get(name, name)}@{cutoff}" if cutoff else METRIC_NAMES.get(name, name)


def _encode_cell(stats: dict[str, float]) -> str:
    cell = f"{stats['encode_seconds']:.1f}"
    return f"{cell} (cached)" if stats.get("corpus_from_cache") else cell


def markdown_table(collection: Collection, results: list[EvaluationResult]) -> str:
    """One row per retriever: its metrics, encode and search seconds, and sparse statistics where there are any."""
    metrics = list(results[0].metrics)
    extra = [column for column in STAT_COLUMNS if any(column[0] in result.stats for result in results)]
    header = ["retriever", *map(_metric_header, metrics), "encode s", "search s", *(column[1] for column in extra)]
    lines = [
        f"{collection.name}: {len(collection.queries):,} queries, {len(collection.corpus):,} documents",
        "",
        "| " + " | ".join(header) + " |",
        "|---|" + "---:|" * (len(header) - 1),
    ]
    for result in results:
        cells = [
            f"`{result.name}`",
            *(f"{result.metrics[metric]:.3f}" for metric in metrics),
            _encode_cell(result.stats),
            f"{result.stats['search_seconds']:.1f}",
            *(form.format(result.stats[stat]) if stat in result.stats else "–" for stat, _, form in extra),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_json(
    path: str, collection: Collection, arguments, results: list[EvaluationResult],
    encoded_texts: dict[str, list[list[int]]] | None = None,
) -> None:
    """The run's metrics, statistics and settings; with several processes, `encoded_texts` too: {retriever: one
    [texts encoded by process 0, by process 1, ...] per encoding it made}."""
    report = {
        "collection": {"name": collection.name, "queries": len(collection.queries), "documents": len(collection.corpus)},
        "arguments": asdict(arguments),
        "results": [
            {"retriever": r.name, "metrics": r.metrics, "stats": r.stats, "settings": r.settings} for r in results
        ],
    }
    if encoded_texts:
        report["encoded_texts"] = encoded_texts
    Path(path).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def run_file_name(position: int, name: str) -> str:
    """`3-hybrid_bm25_my-model.trec`: the retriever's place in the table and its name in file-safe characters."""
    return f"{position}-{re.sub(r'[^A-Za-z0-9._-]+', '_', name).strip('_')}.trec"


def write_trec_runs(folder: str, results: list[EvaluationResult]) -> list[Path]:
    """Each run as a TREC run file (query Q0 document rank score tag), tagged with its file's name."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    paths = []
    for position, result in enumerate(results, start=1):
        path = Path(folder) / run_file_name(position, result.name)
        RanxRun.from_dict(result.run, name=path.stem).save(str(path), kind="trec")
        paths.append(path)
    return paths
