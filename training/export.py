"""Export a SEED pretraining folder as plain BERT, loadable without this package: its encoder and MLM head as a
`BertForMaskedLM`, or, for a folder pre-trained from a SentenceTransformer, a SentenceTransformer over a `BertModel`.

    python training/export.py seed-encoder                      # -> seed-encoder-bert
    python training/export.py seed-encoder --output_dir seed-encoder-bert --overwrite_output_dir

The weak decoder only pre-trains and is left behind. A folder that holds no SEED checkpoint is refused (exit status 2).
"""

import sys
from dataclasses import dataclass, field

from training.common.cli import ArgumentParser, exit_status, parse_arguments
from training.common.errors import InputError
from training.pretraining.bert_export import export_plain_bert


@dataclass
class ExportArguments:
    seed_folder: list[str] = field(
        metadata={"positional": True, "metavar": "SEED_FOLDER",
                  "help": "The SEED pretraining folder (training/pretrain.py's --output_dir) or one of its checkpoints."}
    )
    output_dir: str | None = field(
        default=None, metadata={"help": "Where to write the plain-BERT folder (default: SEED_FOLDER-bert)."}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Replace the contents of a non-empty --output_dir."}
    )


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(ExportArguments, description=__doc__.split("\n\n")[0])

    def export() -> str:
        (arguments,) = parse_arguments(parser, sys.argv[1:] if argv is None else argv)
        if len(arguments.seed_folder) != 1:
            raise InputError(f"expected one SEED_FOLDER, got {len(arguments.seed_folder)}: {' '.join(arguments.seed_folder)}.")
        [seed_folder] = arguments.seed_folder
        output_dir = arguments.output_dir or f"{seed_folder.rstrip('/')}-bert"
        written = export_plain_bert(seed_folder, output_dir, arguments.overwrite_output_dir)
        return f"Plain BERT written to {written} (loads without seed-encoder or trust_remote_code)"

    return exit_status(export)


if __name__ == "__main__":
    sys.exit(main())
