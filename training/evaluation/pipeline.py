"""The work behind `training/evaluate.py`: read the collection, build the retrievers the specs name, evaluate each
and report. Every input is checked (collection, models) before any encoding starts or any file is written."""

import logging
from pathlib import Path

from ..common.distributed import distributed_state, on_main_process
from ..common.errors import InputError
from ..common.models import load_sentence_transformer, load_sparse_encoder, model_kind, split_model_spec
from .arguments import EvaluationArguments
from ..common.shared_encoding import SharedEncoding
from ..data.collection import Collection, load_collection
from .evaluate import EvaluationResult, evaluate_retriever
from .evaluator import model_retriever
from .report import markdown_table, write_json, write_trec_runs
from .retrievers import BM25Retriever, HybridRetriever, Retriever

logger = logging.getLogger(__name__)

SPEC_FORMS = "'bm25', a model folder, 'dense:PATH', 'sparse:PATH' or 'hybrid:A+B[+C]'"


def _new_retriever(spec: str, options: EvaluationArguments, built: dict[str, Retriever]) -> Retriever:
    if spec == "bm25":
        return BM25Retriever(
            k1=options.bm25_k1, b=options.bm25_b, method=options.bm25_method,
            stopwords=options.bm25_stopwords, stemmer=options.bm25_stemmer, name=spec,
        )
    if spec.startswith("hybrid:"):
        members = spec[len("hybrid:"):].split("+")
        if len(members) < 2 or any(not member or member.startswith("hybrid:") for member in members):
            raise InputError(
                f"retriever {spec!r}: a hybrid lists two or more retrievers joined by '+' (e.g. hybrid:bm25+PATH), "
                "none of them a hybrid itself."
            )
        return HybridRetriever([build_retriever(m, options, built) for m in members], method=options.fusion, name=spec)
    form, path = split_model_spec(spec)
    if not Path(path).is_dir():
        raise InputError(f"retriever {spec!r}: {path} is not a folder. Each retriever is {SPEC_FORMS}.")
    if form == "sparse" or (form == "" and model_kind(path) == "sparse-encoder"):
        model = load_sparse_encoder(path, options.max_seq_length)
    else:
        model = load_sentence_transformer(path, options.pooling, options.max_seq_length)
    return model_retriever(model, spec, options.batch_size, options.cache_dir, embedding_dtype=options.embedding_dtype)


def build_retriever(spec: str, options: EvaluationArguments, built: dict[str, Retriever] | None = None) -> Retriever:
    """The retriever a command-line spec names (see SPEC_FORMS); `built` maps specs to retrievers already built, so
    that a model named twice (alone and in a hybrid) is loaded and encodes the corpus once."""
    built = {} if built is None else built
    if spec not in built:
        built[spec] = _new_retriever(spec, options, built)
    return built[spec]


def build_retrievers(specs: list[str], options: EvaluationArguments) -> tuple[list[Retriever], list]:
    """The retrievers `specs` name, and the models they encode with, each once, in the order they were loaded: the
    same order on every process of a run, which `SharedEncoding` relies on."""
    built: dict[str, Retriever] = {}
    retrievers = [build_retriever(spec, options, built) for spec in specs]
    models = [retriever.model for retriever in built.values() if hasattr(retriever, "model")]
    device = distributed_state().device
    if distributed_state().num_processes > 1:  # alone, a model stays where sentence-transformers put it
        for model in models:
            model.to(device)
    return retrievers, models


def load_collections(args: EvaluationArguments) -> tuple[Collection, Collection | None]:
    """The split to evaluate on and the one a hybrid's fusion is tuned on (None unless asked for)."""
    collection = load_collection(args.data_dir, args.split, args.skip_unknown_ids)
    tuning = None
    if args.fusion_tune_split is not None:
        tuning = load_collection(args.data_dir, args.fusion_tune_split, args.skip_unknown_ids, corpus=collection.corpus)
    return collection, tuning


def evaluated(retriever: Retriever, collection: Collection, tuning: Collection | None, args: EvaluationArguments) -> EvaluationResult:
    if tuning is not None and isinstance(retriever, HybridRetriever):
        retriever.index(collection.corpus)
        retriever.tune(tuning.queries, tuning.qrels, args.top_k, split=args.fusion_tune_split)
        logger.info("%s: fusion tuned on %s: %s", retriever.name, args.fusion_tune_split, retriever.params)
    return evaluate_retriever(retriever, collection, args.top_k)


def run_evaluation(args: EvaluationArguments) -> str | None:
    """Evaluate every retriever of `args` on the split; returns the markdown table (also written as JSON and TREC
    runs when asked).

    Under `accelerate launch` with several processes, the main process alone reads the collection, searches, scores
    and writes; every encoding is shared (`SharedEncoding`): each process encodes its slice of every corpus and query
    set, and the report records how many texts each encoded. The other processes return None."""
    with SharedEncoding() as sharing:
        collections: list = []

        def read() -> str | None:
            try:
                collections.extend(load_collections(args))
            except InputError as error:
                return str(error)
            return None

        refusal = on_main_process(read)  # the collection's problem, refused on every process before a model loads
        if refusal is not None:
            raise InputError(refusal)
        retrievers, models = build_retrievers(args.retrievers, args)
        results: list[EvaluationResult] = []  # filled on the main process
        if collections:
            logger.info(
                "Evaluating %d retrievers on %s: %d queries, %d documents",
                len(retrievers), collections[0].name, len(collections[0].queries), len(collections[0].corpus),
            )
        for retriever in retrievers:
            sharing.run(retriever.name, models, lambda r=retriever: results.append(evaluated(r, *collections, args)))
        encoded_texts = sharing.per_process()
    if not collections:
        return None
    collection = collections[0]
    if args.output_json is not None:
        write_json(args.output_json, collection, args, results, encoded_texts)
    if args.save_runs is not None:
        write_trec_runs(args.save_runs, results)
    return markdown_table(collection, results)
