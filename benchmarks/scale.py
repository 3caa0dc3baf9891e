"""How each phase of a fine-tuning run grows with the corpus: wall time and peak memory at N passages, and the
log-log slope between sizes, on synthetic corpora made from the shared data.

A corpus of N passages is built from a pool of real sentences (SciFact's abstracts and the shared English prose):
each passage is 3 to 6 sentences drawn with a seed, with a distinct id, so BM25 sees varied text; each query is one
sentence of a passage, which is its judged document. Every phase runs in a process of its own, so that its peak
resident memory (`ru_maxrss`, less the process's memory once the libraries are imported) is its own:

- `corpus`: loading the BEIR folder (`load_collection`) the first time: reading `corpus.jsonl` and packing it into
  the corpus cache (`--work_dir/corpus-cache`, which every phase reads from), its entry removed first;
- `corpus_mapped`: loading it again, opened from the cache, and reading every text by its id; then a second process
  doing the same while this one holds it: each one's anonymous and file-backed resident memory, and its proportional
  share (Pss), which splits the pages the two map between them;
- `bm25_index`, `bm25_search`: indexing the corpus, then retrieving the top 100 of every query (the mining search);
- `bm25_teacher`: the BM25 teacher's scores of 8 pairs a query (`BM25Teacher.score`), also with 10x the queries:
  its `teacher_peak_mb` (its index and its scoring, the peak above the pairs it is given) and its `scoring_peak_mb`
  (what scoring holds beyond the pairs and the index, traced by tracemalloc);
- `dense_encoding`: encoding the corpus with `--encoder` (only up to `--max_encoded`: a CPU encodes slowly);
- `dense_search`: the dense retriever's exact index and top-100 search of every query, its corpus vectors read from
  the embedding cache (random unit vectors stand in where the corpus was not encoded);
- `dense_search_ivf`: the same with the approximate index mining may use (`--mining_index ivf`), and its recall@10
  and recall@100 against `dense_search`'s top 100, at the default and at other `nprobe` (searched again on the
  same index; the phase's time is the build and the default's search);
- `label_free_pairs`: a label-free run's training set made of the corpus file (`--corpus_file corpus.jsonl
  --pseudo_queries sentences`, seed 1) and written into the corpus cache, its entry removed first (the datasets
  cache of the file, which the first run of a size writes, is kept); `label_free_pairs_opened`: the same training
  set opened from the cache, as a rerun or every other process does; each with what the process holds once it has
  the training set (anonymous and file-backed resident memory, above its memory before).

    python -m benchmarks.scale --work_dir scale-work --sizes 10000 100000 1000000 \\
        --encoder ../shared/models/splade-tiny

The table and the slopes are printed and kept in `--work_dir/scale.json`; rerunning skips the measured phases.
"""

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from benchmarks.harness import ResultStore, changed_settings, limit_threads, markdown_table, reset_peak_rss, status_kib
from benchmarks.synthetic_collection import sentence_pool, write_collection

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
TOP_K = 100
PAIRS_PER_QUERY = 8
ENCODED_LENGTH = 128  # the dense encoder's tokens a text, by default
PHASES = (
    "corpus", "corpus_mapped", "bm25_index", "bm25_search", "bm25_teacher", "bm25_teacher_10x_queries", "dense_encoding", "dense_search",
    "dense_search_ivf", "label_free_pairs", "label_free_pairs_opened",
)
OTHER_NPROBES = (32, 512)
EXACT_TOP = "exact_dense_top-{length}.json"  # dense_search's top 100 per query at a length, in the collection's folder


# Phases, each run in a process of its own -----------------------------------------------------------------------


def run_phase(phase: str, folder: Path, encoder: str, cache_dir: Path, length: int = ENCODED_LENGTH) -> dict:
    """`phase` on the collection in `folder`: {"phase_seconds": the phase's own wall time, ...}."""
    from training.data.collection import load_collection
    from training.data.corpus_cache import cache_entry, corpus_cache_dir

    if phase.startswith("label_free"):
        return label_free_phase(phase, folder)
    if phase == "corpus":
        shutil.rmtree(cache_entry(folder / "corpus.jsonl", corpus_cache_dir()), ignore_errors=True)
    before = memory_breakdown() if phase == "corpus_mapped" else None
    start = time.perf_counter()
    collection = load_collection(str(folder), "test")
    if phase == "corpus":
        return {"phase_seconds": time.perf_counter() - start}
    if phase == "corpus_mapped":
        return {"phase_seconds": time.perf_counter() - start, **mapped_corpus_memory(collection.corpus, folder, before)}
    if phase.startswith("bm25"):
        return bm25_phase(phase, collection)
    return dense_phase(phase, collection, folder, encoder, cache_dir, length)


READ_EVERY_TEXT = """
import json, sys
from benchmarks.scale import memory_breakdown, read_every_text
from training.data.collection import load_corpus
before = memory_breakdown()
corpus = load_corpus(sys.argv[1])  # held while measured: closed once freed
characters = read_every_text(corpus)
print(json.dumps({"characters": characters, **memory_breakdown(before)}))
"""


def read_every_text(corpus) -> int:
    """Read every text of `corpus` by its id, as examples are built (touching every page of an opened one's texts
    file, ids and their index); its number of characters."""
    return sum(len(corpus[identifier]) for identifier in corpus)


def mapped_corpus_memory(corpus, folder: Path, before: dict) -> dict:
    """This process's memory once it has read every text of the corpus opened from the cache, then a second
    process's, which opens and reads the same corpus while this one still holds it; each above its own memory before
    it loaded the corpus."""
    characters = read_every_text(corpus)
    first = memory_breakdown(before)
    second = subprocess.run(
        [sys.executable, "-c", READ_EVERY_TEXT, str(folder)], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    second = json.loads(second.stdout.strip().splitlines()[-1])
    assert second["characters"] == characters, "the second process read another corpus"
    return {"first_process": first, "second_process": second}


def memory_breakdown(since: dict | None = None) -> dict:
    """Resident memory now (Linux), in MB: anonymous, file-backed (the corpus' mapped ids), and the proportional set
    size, which counts a page shared by k processes as 1/k; each less its value in `since`, if given."""
    rollup = dict(line.split(":", 1) for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:])
    now = {"anonymous_mb": status_kib("RssAnon") / 1024, "file_mb": status_kib("RssFile") / 1024,
           "pss_mb": int(rollup["Pss"].split()[0]) / 1024}
    return {key: value - (since or {}).get(key, 0.0) for key, value in now.items()}


def label_free_phase(phase: str, folder: Path) -> dict:
    """A label-free run's training set of sentence pseudo-queries, made and written (`label_free_pairs`) or opened
    from the corpus cache (`label_free_pairs_opened`)."""
    from training.data.corpus_cache import corpus_cache_dir
    from training.finetuning.arguments import FinetuningDataArguments
    from training.finetuning.data import made_training_set

    if phase == "label_free_pairs":  # the work folder's cache holds this benchmark's entries alone
        for entry in corpus_cache_dir().glob("pseudo-pairs-*"):
            shutil.rmtree(entry, ignore_errors=True)
    arguments = FinetuningDataArguments(corpus_file=[str(folder / "corpus.jsonl")], pseudo_queries=["sentences"])
    before = memory_breakdown()
    start = time.perf_counter()
    training_set = made_training_set(arguments, 1)
    seconds = time.perf_counter() - start
    return {"phase_seconds": seconds, "training_queries": len(training_set.queries), "held": memory_breakdown(before)}


def bm25_phase(phase: str, collection) -> dict:
    from training.evaluation.retrievers import BM25Retriever
    from training.finetuning.teachers import BM25Teacher

    start = time.perf_counter()
    if phase.startswith("bm25_teacher"):
        rng = np.random.default_rng(0)
        queries = list(collection.queries.values())
        if phase == "bm25_teacher_10x_queries":
            queries = [f"{query} {number}" for number in range(10) for query in queries]
        pair_queries = [query for query in queries for _ in range(PAIRS_PER_QUERY)]
        # each drawn document's text read once, as a round's teacher scores are given them; a list of every text, as
        # this phase made first, held 0.7 GB at 1M passages
        rows = rng.integers(0, len(collection.corpus), size=len(pair_queries)).tolist()
        texts = {row: collection.corpus.text_at(row) for row in sorted(set(rows))}
        pair_documents = [texts[row] for row in rows]
        # The teacher's own memory (its index, built at its first scoring, and the scoring) is its peak above the
        # pairs it is given, which a fine-tuning round holds whatever scores them.
        with_pairs_kib, peak_was_reset = status_kib("VmRSS"), reset_peak_rss()
        teacher = BM25Teacher(collection.corpus)
        teacher.index()  # built before scoring is traced
        tracemalloc.start()  # what scoring itself holds, beyond the pairs and the index
        start = time.perf_counter()
        teacher.score(pair_queries, pair_documents)
        seconds, scoring_peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        result = {"phase_seconds": seconds, "pairs": len(pair_queries), "scoring_peak_mb": scoring_peak / 2**20}
        if peak_was_reset:
            result["teacher_peak_mb"] = (status_kib("VmHWM") - with_pairs_kib) / 1024
        return result
    retriever = BM25Retriever(show_progress_bar=False)
    retriever.index(collection.corpus)
    if phase == "bm25_index":
        return {"phase_seconds": time.perf_counter() - start}
    start = time.perf_counter()
    retriever.search(collection.queries, top_k=TOP_K)
    return {"phase_seconds": time.perf_counter() - start}


def dense_phase(phase: str, collection, folder: Path, encoder: str, cache_dir: Path, length: int) -> dict:
    from training.common.models import load_sentence_transformer
    from training.evaluation.embedding_cache import weights_fingerprint
    from training.evaluation.retrievers import DenseRetriever
    from training.evaluation.retrievers.faiss_index import EXACT, IVF

    model = load_sentence_transformer(encoder, max_seq_length=length)
    retriever = DenseRetriever(
        model, "dense", batch_size=64, cache_dir=str(cache_dir), cache_key=weights_fingerprint(model),
        show_progress_bar=False, index_kind=IVF if phase == "dense_search_ivf" else EXACT,
    )
    start = time.perf_counter()
    retriever.index(collection.corpus)
    indexed = time.perf_counter() - start
    if phase == "dense_encoding":
        return {"phase_seconds": indexed, "from_cache": retriever.corpus_from_cache}
    start = time.perf_counter()
    run = retriever.search(collection.queries, top_k=TOP_K)
    result = {
        "phase_seconds": time.perf_counter() - start, "index_seconds": indexed, "from_cache": retriever.corpus_from_cache,
        "faiss_search_seconds": faiss_seconds(retriever),
    }
    if phase == "dense_search":
        ranked = {query_id: list(documents) for query_id, documents in run.items()}
        (folder / EXACT_TOP.format(length=length)).write_text(json.dumps(ranked))
        return result
    exact = json.loads((folder / EXACT_TOP.format(length=length)).read_text())
    result.update(index=retriever.settings["index"], phase_seconds=result["phase_seconds"] + indexed)
    result.update(recall_against_exact(run, exact, prefix=f"nprobe{retriever.nprobe}_"))
    result[f"nprobe{retriever.nprobe}_faiss_search_seconds"] = result["faiss_search_seconds"]
    for nprobe in OTHER_NPROBES:
        retriever.search_lists(nprobe)  # the same trained lists searched wider or narrower
        start = time.perf_counter()
        run = retriever.search(collection.queries, top_k=TOP_K)
        result[f"nprobe{nprobe}_search_seconds"] = time.perf_counter() - start
        result[f"nprobe{nprobe}_faiss_search_seconds"] = faiss_seconds(retriever)
        result.update(recall_against_exact(run, exact, prefix=f"nprobe{nprobe}_"))
    return result


def faiss_seconds(retriever) -> float:
    """The last search's time less its queries' encoding: faiss' own."""
    stats = retriever.stats()
    return stats["search_seconds"] - stats["query_encode_seconds"]


def recall_against_exact(run: dict, exact: dict, prefix: str) -> dict:
    """The mean share of exact search's top 10 and top 100 that `run` also returns in its top 10 and top 100."""
    recalls = {}
    for depth in (10, TOP_K):
        shares = [len(set(list(run.get(query_id, {}))[:depth]) & set(ranked[:depth])) / len(ranked[:depth])
                  for query_id, ranked in exact.items() if ranked]
        recalls[f"{prefix}recall@{depth}"] = float(np.mean(shares))
    return recalls


def stand_in_vectors(folder: Path, encoder: str, cache_dir: Path, length: int) -> None:
    """Random unit vectors written where the dense retriever's cache would keep the corpus' encoding, so that search
    at a size too large to encode here reads them as it would read real ones."""
    from training.common.models import load_sentence_transformer
    from training.data.collection import load_collection
    from training.evaluation.embedding_cache import model_cache_file, save_embeddings, weights_fingerprint
    from training.data.fingerprint import corpus_fingerprints

    model = load_sentence_transformer(encoder, max_seq_length=length)
    corpus = load_collection(str(folder), "test").corpus  # as the phase reads it: its fingerprint keys the cache
    path = model_cache_file(str(cache_dir), weights_fingerprint(model), model, corpus_fingerprints(corpus).texts)
    if path.is_file():
        return
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((len(corpus), model.get_sentence_embedding_dimension()), dtype=np.float32)
    save_embeddings(path, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))


def saved_encoder(path: str, folder: Path) -> str:
    """The encoder as a SentenceTransformer folder, saved once: loaded from a bare checkpoint, a model may get freshly
    initialised weights (a BERT pooler), different in every process, and the embedding cache is keyed by the weights,
    so every phase must load the very same ones."""
    from training.common.models import load_sentence_transformer

    if not (folder / "modules.json").is_file():
        load_sentence_transformer(path, max_seq_length=ENCODED_LENGTH).save(str(folder))
    return str(folder)


def resident_mb() -> float:
    """This process's resident memory now, in MB (Linux)."""
    return status_kib("VmRSS") / 1024


def measured_in_a_process(phase: str, folder: Path, encoder: str, cache_dir: Path, length: int) -> dict:
    """The phase run by this module in a new process: its result and that process's peak resident memory."""
    command = [sys.executable, "-m", "benchmarks.scale", "--phase", phase, "--collection", str(folder),
               "--encoder", encoder, "--cache_dir", str(cache_dir), "--encoded_length", str(length)]
    finished = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    if finished.returncode != 0:
        sys.exit(f"phase {phase} on {folder} failed:\n{finished.stderr[-3000:]}")
    return json.loads(finished.stdout.strip().splitlines()[-1])


# The table ------------------------------------------------------------------------------------------------------


def slope(small: tuple[int, float], large: tuple[int, float]) -> float | None:
    """d log(value) / d log(N) between two sizes."""
    (n_small, small_value), (n_large, large_value) = small, large
    if small_value <= 0 or large_value <= 0:
        return None
    return math.log(large_value / small_value) / math.log(n_large / n_small)


def report(results: dict, sizes: list[int]) -> str:
    rows = []
    for phase in PHASES:
        measured = [(size, results.get(f"{phase}@{size}")) for size in sizes]
        measured = [(size, result) for size, result in measured if result is not None]
        if not measured:
            continue
        cells = [f"{result['phase_seconds']:.1f} s, {result['phase_peak_mb']:.0f} MB" for _, result in measured]
        slopes = []
        for (small, small_result), (large, large_result) in zip(measured, measured[1:]):
            time_slope = slope((small, small_result["phase_seconds"]), (large, large_result["phase_seconds"]))
            memory_slope = slope((small, small_result["phase_peak_mb"]), (large, large_result["phase_peak_mb"]))
            slopes.append(f"{small:,}->{large:,}: time {time_slope:.2f}, memory {memory_slope:.2f}")
        rows.append([phase, "; ".join(f"N={size:,}: {cell}" for (size, _), cell in zip(measured, cells)), "; ".join(slopes)])
    table = markdown_table(["phase", "wall time; peak memory above the libraries' own", "log-log slope"], rows)
    return "\n".join([
        table, *sharing_lines(results, sizes), *teacher_lines(results, sizes), *label_free_lines(results, sizes),
        *recall_lines(results, sizes),
    ])


def teacher_lines(results: dict, sizes: list[int]) -> list[str]:
    """Per size, the BM25 teacher's own peak (its index and scoring, above the pairs it is given) with the queries and
    with 10x them: the issue asks for the two within 10%."""
    lines = []
    for size in sizes:
        measured = [results.get(f"{phase}@{size}") for phase in ("bm25_teacher", "bm25_teacher_10x_queries")]
        cells = [f"{result['pairs']:,} pairs: {result['teacher_peak_mb']:.0f} MB (scoring {result['scoring_peak_mb']:.1f} MB)"
                 for result in measured if result is not None and "teacher_peak_mb" in result]
        if cells:
            lines.append(f"- N={size:,}, the BM25 teacher's peak above the pairs it is given: " + "; ".join(cells))
    return lines


def sharing_lines(results: dict, sizes: list[int]) -> list[str]:
    """Per size, the memory of two processes reading the same corpus opened from the cache."""
    lines = []
    for size in sizes:
        result = results.get(f"corpus_mapped@{size}")
        if result is not None:
            cells = [f"{which.replace('_', ' ')}: anonymous {memory['anonymous_mb']:.0f} MB, file-backed "
                     f"{memory['file_mb']:.0f} MB, Pss {memory['pss_mb']:.0f} MB"
                     for which, memory in ((key, result[key]) for key in ("first_process", "second_process"))]
            lines.append(f"- N={size:,}, every text read by its id from the opened corpus, above each process's memory "
                         "before it loaded the corpus: " + "; ".join(cells))
    return lines


def label_free_lines(results: dict, sizes: list[int]) -> list[str]:
    """Per size, what a process holds once it has the label-free training set, made or opened."""
    lines = []
    for size in sizes:
        cells = [
            f"{phase}: {result['training_queries']:,} training queries, anonymous {result['held']['anonymous_mb']:.0f} MB, "
            f"file-backed {result['held']['file_mb']:.0f} MB"
            for phase in ("label_free_pairs", "label_free_pairs_opened")
            if (result := results.get(f"{phase}@{size}")) is not None
        ]
        if cells:
            lines.append(f"- N={size:,}, held once the training set is made, above the memory before: " + "; ".join(cells))
    return lines


def recall_lines(results: dict, sizes: list[int]) -> list[str]:
    """Per size, the IVF index's recall against exact search at each nprobe."""
    lines = []
    for size in sizes:
        result = results.get(f"dense_search_ivf@{size}")
        if result is None:
            continue
        nprobes = sorted(int(key[len("nprobe"):].split("_")[0]) for key in result if key.endswith("_recall@10"))
        cells = [
            f"nprobe {nprobe}: recall@10 {result[f'nprobe{nprobe}_recall@10']:.3f}, recall@100 "
            f"{result[f'nprobe{nprobe}_recall@{TOP_K}']:.3f}"
            + (f", faiss {result[f'nprobe{nprobe}_faiss_search_seconds']:.1f} s"
               if f"nprobe{nprobe}_faiss_search_seconds" in result else "")
            for nprobe in nprobes
        ]
        lines.append(f"- N={size:,}, {result['index']}, built in {result['index_seconds']:.1f} s: " + "; ".join(cells))
    return lines


def check_work_dir(work: Path, settings: dict) -> None:
    """Refuse a work folder whose results were measured with other settings (its results are kept by phase and size
    alone, so they would be reported as this run's), before any work; record the settings in a new one."""
    path = work / "settings.json"
    if path.is_file():
        differences = [f"--{name} {recorded} there, {given} now"
                       for name, (recorded, given) in changed_settings(json.loads(path.read_text()), settings).items()]
        if differences:
            sys.exit(f"--work_dir {work} holds results measured with other settings ({'; '.join(differences)}). "
                     "Rerun with the same settings to resume it (--sizes and --phases may change), or choose another "
                     "--work_dir.")
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work_dir", default="scale-work",
                        help="Where the collections, cache and results go. It holds the results of one set of "
                        "--queries, --encoder, --encoded_length, --max_encoded and --data_dir, and refuses others.")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], help="Passages a corpus.")
    parser.add_argument("--queries", type=int, default=10_000, help="Queries of every collection.")
    parser.add_argument("--encoder", default=str(REPO_ROOT.parent / "shared" / "models" / "splade-tiny"),
                        help="The dense encoder's folder (default: splade-tiny's BERT with [CLS] pooling, small "
                        "enough to encode a corpus on a CPU; its vectors mean nothing here).")
    parser.add_argument("--encoded_length", type=int, default=ENCODED_LENGTH,
                        help=f"The dense encoder's tokens a text (default {ENCODED_LENGTH}); fewer encode faster.")
    parser.add_argument("--max_encoded", type=int, default=100_000,
                        help="Encode corpora up to this size; larger ones search random stand-in vectors.")
    parser.add_argument("--data_dir", default=str(SHARED_DATA), help="The shared data (scifact/, pretrain_text/).")
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES),
                        help="The phases to measure (default: all); dense_search_ivf needs dense_search's results.")
    parser.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)  # with SEED_ENCODER_CORPUS_CACHE set
    parser.add_argument("--collection", help=argparse.SUPPRESS)
    parser.add_argument("--cache_dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    limit_threads()
    if args.phase:  # one phase, in the process `measured_in_a_process` started
        import training.evaluation.retrievers  # noqa: F401  (the libraries' own memory, before the phase's)
        import training.finetuning.data  # noqa: F401
        import training.finetuning.teachers  # noqa: F401

        baseline = resident_mb()
        result = run_phase(args.phase, Path(args.collection), args.encoder, Path(args.cache_dir), args.encoded_length)
        # The process's whole peak from getrusage, not VmHWM (harness.status_kib): the teacher phases reset VmHWM to
        # read their own peak above the pairs, and getrusage's maximum survives that reset.
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({**result, "peak_rss_mb": peak, "phase_peak_mb": peak - baseline}))
        return

    work = Path(args.work_dir)
    check_work_dir(work, {
        "queries": args.queries, "encoder": str(Path(args.encoder).resolve()), "encoded_length": args.encoded_length,
        "max_encoded": args.max_encoded, "data_dir": str(Path(args.data_dir).resolve()),
    })
    if "dense_search_ivf" in args.phases and "dense_search" not in args.phases:
        for size in args.sizes:
            if not (work / f"collection-{size}" / EXACT_TOP.format(length=args.encoded_length)).is_file():
                sys.exit(f"--phases dense_search_ivf measures recall against dense_search's top {TOP_K}, which no run "
                         f"has kept for {size:,} passages in {work}: add dense_search to --phases.")
    cache_dir = work / "embedding-cache"
    from training.data.corpus_cache import CACHE_VARIABLE

    os.environ[CACHE_VARIABLE] = str(work / "corpus-cache")  # the phases' processes inherit it
    encoder = saved_encoder(args.encoder, work / "encoder")
    store = ResultStore(work / "scale.json")
    pool = sentence_pool(Path(args.data_dir))
    for size in sorted(args.sizes):
        folder = write_collection(work / f"collection-{size}", size, args.queries, pool)
        for phase in [phase for phase in PHASES if phase in args.phases]:
            if phase == "dense_encoding" and size > args.max_encoded:
                continue
            if phase.startswith("dense_search") and size > args.max_encoded:
                stand_in_vectors(folder, encoder, cache_dir, args.encoded_length)
            store.get_or_run(
                f"{phase}@{size}", lambda: measured_in_a_process(phase, folder, encoder, cache_dir, args.encoded_length)
            )
    print(report(store.results, sorted(args.sizes)))


if __name__ == "__main__":
    main()
