"""Score retrievers (BM25, dense, sparse, hybrid) on a BEIR-layout collection; print one markdown table.

    python training/evaluate.py bm25 path/to/st-model hybrid:bm25+path/to/st-model --data_dir ../shared/data/scifact --split test
    python training/evaluate.py sparse:seed-encoder seed-encoder --data_dir DIR --pooling cls --output_json results.json
    python training/evaluate.py bm25 MODEL hybrid:bm25+MODEL --data_dir DIR --fusion score_sum --fusion_tune_split dev
    accelerate launch --num_processes 4 training/evaluate.py MODEL --data_dir DIR    # each process encodes a quarter

`--config FILE` reads arguments from a YAML or JSON file (the retrievers too); flags beside it override them.
"""

import logging
import sys

from training.common.cli import ArgumentParser, exit_status, parse_arguments
from training.common.distributed import relaunch_cpu_processes_if_requested
from training.evaluation.arguments import EvaluationArguments
from training.evaluation.pipeline import run_evaluation


def main(argv: list[str] | None = None) -> int:
    relaunch_cpu_processes_if_requested()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    parser = ArgumentParser(EvaluationArguments, description=__doc__.split("\n\n")[0])

    def evaluate() -> str | None:
        (args,) = parse_arguments(parser, sys.argv[1:] if argv is None else argv)
        return run_evaluation(args)

    return exit_status(evaluate)


if __name__ == "__main__":
    sys.exit(main())
