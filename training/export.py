"""Export a SEED pretraining folder as plain BERT, or a retriever as ONNX for serving without PyTorch.

    python training/export.py seed-encoder                      # -> seed-encoder-bert
    python training/export.py seed-encoder --output_dir seed-encoder-bert --overwrite_output_dir
    python training/export.py my-retriever --onnx --quantize int8   # -> my-retriever-onnx

Plain BERT: the SEED folder's encoder and MLM head as a `BertForMaskedLM`, or, for a folder pre-trained from a
SentenceTransformer, a SentenceTransformer over a `BertModel`; the weak decoder only pre-trains and is left behind.
ONNX (`--onnx`): a SentenceTransformer (dense) or SparseEncoder (sparse) folder as `model.onnx`, whose output is the
text's vector, with the tokenizer and `onnx_encoder.py`, a loader that needs only onnxruntime, tokenizers and numpy
(see docs/serving.md). A folder of the wrong kind is refused (exit status 2).
"""

import sys
from dataclasses import dataclass, field

from training.common.cli import ArgumentParser, exit_status, parse_arguments
from training.common.errors import InputError
from training.onnx_serving.export import QUANTIZATIONS, export_onnx
from training.pretraining.bert_export import export_plain_bert


@dataclass
class ExportArguments:
    folder: list[str] = field(
        metadata={"positional": True, "metavar": "FOLDER",
                  "help": "The SEED pretraining folder (training/pretrain.py's --output_dir) or one of its checkpoints; "
                          "with --onnx, a SentenceTransformer or SparseEncoder folder (training/finetune.py's "
                          "--output_dir), or sparse:PATH / dense:PATH for a bare checkpoint."}
    )
    output_dir: str | None = field(
        default=None, metadata={"help": "Where to write the exported folder (default: FOLDER-bert, or FOLDER-onnx "
                                        "with --onnx)."}
    )
    onnx: bool = field(
        default=False, metadata={"help": "Export a retriever as an ONNX graph whose output is its vector (dense: the "
                                         "pooled, normalised embedding; sparse: the vocabulary-sized SPLADE vector)."}
    )
    quantize: str | None = field(
        default=None, metadata={"choices": list(QUANTIZATIONS),
                                "help": "With --onnx, also write model_int8.onnx: onnxruntime's dynamic int8 "
                                        "quantisation (what it costs and gains: benchmarks/records/onnx_serving.md)."}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Replace the contents of a non-empty --output_dir."}
    )


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(ExportArguments, description=__doc__.split("\n\n")[0])

    def export() -> str:
        (arguments,) = parse_arguments(parser, sys.argv[1:] if argv is None else argv)
        if len(arguments.folder) != 1:
            raise InputError(f"expected one FOLDER, got {len(arguments.folder)}: {' '.join(arguments.folder)}.")
        [folder] = arguments.folder
        if arguments.quantize and not arguments.onnx:
            raise InputError(f"--quantize {arguments.quantize}: quantisation is for ONNX export. Add --onnx.")
        if arguments.onnx:
            output_dir = arguments.output_dir or f"{folder.split(':', 1)[-1].rstrip('/')}-onnx"
            difference = export_onnx(folder, output_dir, arguments.quantize, arguments.overwrite_output_dir)
            return (
                f"ONNX written to {output_dir} (its vectors within {difference:.1e} of the model's own; load it with "
                f"{output_dir}/onnx_encoder.py, which needs only onnxruntime, tokenizers and numpy)"
            )
        output_dir = arguments.output_dir or f"{folder.rstrip('/')}-bert"
        written = export_plain_bert(folder, output_dir, arguments.overwrite_output_dir)
        return f"Plain BERT written to {written} (loads without seed-encoder or trust_remote_code)"

    return exit_status(export)


if __name__ == "__main__":
    sys.exit(main())
