"""Encode texts with a retriever exported by `training/export.py --onnx`, using onnxruntime, tokenizers and numpy
alone: no torch, no sentence-transformers, no seed-encoder.

Every exported folder carries a copy of this file as `onnx_encoder.py`, so the folder is all a user needs:

    import sys; sys.path.insert(0, "minilm-onnx")            # the exported folder
    from onnx_encoder import OnnxEncoder

    encoder = OnnxEncoder("minilm-onnx")                      # model.onnx; quantized=True runs model_int8.onnx
    documents = encoder.encode_document(["Aspirin inhibits platelet aggregation.", "..."])
    queries = encoder.encode_query(["does aspirin thin the blood?"])
    scores = queries @ documents.T                            # dense: float32 [texts, dimension], normalised if the
                                                              # model normalises
    # sparse (a SPLADE folder): one (token ids, weights) pair per text, its non-zero vocabulary entries

The vectors are those of `SentenceTransformer(folder).encode_query / encode_document` (dense) and
`SparseEncoder(folder).encode_query / encode_document` (sparse) for the folder that was exported: the same
tokenizer (`tokenizer.json`), truncation at the same `max_seq_length`, the same prompts, and pooling and
normalisation inside the graph.
"""

import json
from pathlib import Path

import numpy as np
import onnxruntime
from tokenizers import Tokenizer

CONFIG_FILE = "onnx_config.json"


class OnnxEncoder:
    """An exported dense or sparse retriever, run by onnxruntime on the CPU."""

    def __init__(self, folder: str | Path, quantized: bool = False, threads: int | None = None):
        folder = Path(folder)
        self.config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        model_file = self.config["int8_model_file" if quantized else "model_file"]
        if model_file is None:
            raise FileNotFoundError(f"{folder}: no int8 model; export it again with --quantize int8.")
        options = onnxruntime.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        self.session = onnxruntime.InferenceSession(
            str(folder / model_file), options, providers=["CPUExecutionProvider"]
        )
        self.input_names = [graph_input.name for graph_input in self.session.get_inputs()]
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self.config["max_seq_length"])
        self.tokenizer.enable_padding(pad_id=self.config["pad_token_id"], pad_token=self.config["pad_token"])

    @property
    def sparse(self) -> bool:
        return self.config["kind"] == "sparse"

    def encode(self, texts: list[str], prompt: str = "", batch_size: int = 32):
        """Dense: a float32 array [texts, dimension]. Sparse: a list of (token ids, weights) arrays, one per text,
        the non-zero entries of its vocabulary-sized vector. `prompt` is prefixed to every text."""
        vectors = []
        for start in range(0, len(texts), batch_size):
            encodings = self.tokenizer.encode_batch([prompt + text for text in texts[start:start + batch_size]])
            inputs = {
                "input_ids": np.array([encoding.ids for encoding in encodings], dtype=np.int64),
                "attention_mask": np.array([encoding.attention_mask for encoding in encodings], dtype=np.int64),
                "token_type_ids": np.array([encoding.type_ids for encoding in encodings], dtype=np.int64),
            }
            [batch] = self.session.run([self.config["output_name"]], {name: inputs[name] for name in self.input_names})
            if self.sparse:
                vectors += [(np.flatnonzero(row), row[row != 0]) for row in batch]
            else:
                vectors.append(batch)
        if self.sparse:
            return vectors
        return np.concatenate(vectors) if vectors else np.zeros((0, self.config["dimension"]), dtype=np.float32)

    def encode_query(self, texts: list[str], batch_size: int = 32):
        return self.encode(texts, self.config["query_prompt"], batch_size)

    def encode_document(self, texts: list[str], batch_size: int = 32):
        return self.encode(texts, self.config["document_prompt"], batch_size)
