"""A dense or sparse retriever written as an ONNX graph whose output is the text's vector, the library function behind
`training/export.py --onnx`.

- Dense (a SentenceTransformer: Transformer, Pooling, optional Dense and Normalize): the graph is the whole module
  chain, so its output `sentence_embedding` [batch, dimension] is pooled and normalised as the model does it.
- Sparse (a SPLADE SparseEncoder: Transformer(fill-mask) + SpladePooling(max)): the graph's output
  `sentence_embedding` is the vocabulary-sized vector [batch, vocabulary], max-pooled over the tokens after
  log(1 + ReLU). A fixed-width output is what every ONNX runtime and tool can take; its non-zero entries are picked
  outside the graph (`onnx_encoder.py`), in microseconds beside the encoder. The graph computes every token's
  vocabulary logits before the max ([batch, length, vocabulary]: 1 GB at 32 texts of 256 tokens with BERT's vocabulary),
  so sparse batches are kept small.

The graph is traced with eager attention and rewritten with onnxruntime's transformer fusions (its own operators:
the graph is for onnxruntime). The folder holds `model.onnx` (fp32, dynamic batch and sequence axes),
`model_int8.onnx` with `--quantize int8` (onnxruntime's dynamic quantisation: int8 weights, activations quantised per
batch), the tokenizer, `onnx_config.json`
(kind, max length, prompts, pad token, output name) and `onnx_encoder.py`, the loader that needs only onnxruntime,
tokenizers and numpy. Before the folder is published, the fp32 graph encodes a few texts (one longer than the max
length) and its vectors are compared with the model's own.
"""

import io
import json
import logging
import shutil
import warnings
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

import numpy as np
import torch
from sentence_transformers import SentenceTransformer, SparseEncoder
from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

from ..common.errors import InputError
from ..common.models import load_sentence_transformer, load_sparse_encoder, model_kind, split_model_spec
from ..common.output_dir import check_export_dir, clear_output_dir, publish_final_model, staging_dir
from ..common.sparse_encoding import DOCUMENT_PROMPT_NAMES, has_standard_splade_form
from . import encoder as onnx_encoder

logger = logging.getLogger(__name__)

MODEL_FILE = "model.onnx"
INT8_MODEL_FILE = "model_int8.onnx"
LOADER_FILE = "onnx_encoder.py"
OUTPUT_NAME = "sentence_embedding"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 18
QUANTIZATIONS = ("int8",)
# The architectures onnxruntime's BERT fusions recognise.
FUSABLE_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "electra")
# The largest difference from the model's own vectors that the export accepts (fp32 rounding is ~1e-7).
TOLERANCE = 1e-4
DENSE_MODULES = (Transformer, Pooling, Dense, Normalize)
# What the export checks its graph on: short, mixed lengths, and one text longer than any max length.
CHECK_TEXTS = (
    "Aspirin inhibits platelet aggregation.",
    "What is the role of the microbiome in obesity?",
    " ".join(["Mutations in the gene were associated with a higher risk of disease in the cohort."] * 60),
)


def load_retriever(spec: str) -> SentenceTransformer | SparseEncoder:
    """The retriever `spec` names: a SentenceTransformer or SparseEncoder folder, or `dense:PATH` / `sparse:PATH` for a
    bare checkpoint (as `training/evaluate.py` takes them); anything else is refused (InputError)."""
    form, path = split_model_spec(spec)
    kind = model_kind(path)
    if form == "sparse" or (form == "" and kind == "sparse-encoder"):
        return load_sparse_encoder(path)
    if form == "dense" or kind == "sentence-transformer":
        return load_sentence_transformer(path)
    if kind == "transformers":
        raise InputError(
            f"{path}: a bare transformers checkpoint, which does not say how to pool it. Pass sparse:{path} to export "
            f"it as SPLADE (it needs an MLM head) or dense:{path} for [CLS] vectors, or export the SentenceTransformer "
            "or SparseEncoder folder that fine-tuning wrote."
        )
    raise InputError(
        f"{path}: a {kind} folder, not a retriever. ONNX export takes a SentenceTransformer (dense) or a SparseEncoder "
        "(sparse) folder, e.g. the --output_dir of training/finetune.py."
    )


def check_exportable(model: SentenceTransformer | SparseEncoder, spec: str) -> None:
    """Refuse (InputError) a model whose vectors the graph could not reproduce: other modules than the plain chain."""
    modules = list(model)
    if isinstance(model, SparseEncoder):
        if not has_standard_splade_form(model):
            raise InputError(
                f"{spec}: a SparseEncoder of another form than Transformer(fill-mask) + SpladePooling(max) "
                f"({', '.join(type(module).__name__ for module in modules)}). Only that form is exported."
            )
        return
    unsupported = [type(module).__name__ for module in modules if not isinstance(module, DENSE_MODULES)]
    if unsupported or not isinstance(modules[0], Transformer):
        raise InputError(
            f"{spec}: modules {', '.join(type(module).__name__ for module in modules)}; ONNX export takes a Transformer "
            "followed by Pooling, Dense and Normalize modules only."
        )
    pooling = next((module for module in modules if isinstance(module, Pooling)), None)
    if pooling is not None and not pooling.include_prompt and any(model.prompts.values()):
        raise InputError(
            f"{spec}: its Pooling leaves the prompt's tokens out (include_prompt false), which the exported graph cannot "
            "know. Export a model whose pooling includes its prompts."
        )


def resolved_prompt(model: SentenceTransformer | SparseEncoder, names: tuple[str, ...]) -> str:
    """The prompt `encode_query` (names ('query',)) or `encode_document` (DOCUMENT_PROMPT_NAMES) prefixes: the first
    of `names` the model has, else its default prompt, else none, as sentence-transformers 6 resolves it."""
    for name in names:
        if name in model.prompts:
            return model.prompts[name]
    return model.prompts.get(model.default_prompt_name, "") if model.default_prompt_name else ""


class VectorGraph(torch.nn.Module):
    """The model's module chain from token ids to its `sentence_embedding`: what the ONNX graph computes.

    A SPLADE model's pooling is computed in an equal but cheaper order: the max over tokens of log(1 + ReLU(logit))
    is log(1 + ReLU(max logit)), as both functions are non-decreasing, so the graph takes the max of the [batch, length,
    vocabulary] logits first and activates only [batch, vocabulary] values (SpladePooling activates every logit:
    two more passes over the largest tensor of the graph)."""

    def __init__(self, model: SentenceTransformer | SparseEncoder):
        super().__init__()
        self.model = model
        self.sparse = isinstance(model, SparseEncoder)

    def forward(self, input_ids, attention_mask, token_type_ids):
        features = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        if not self.sparse:
            return self.model(features)[OUTPUT_NAME]
        transformer, pooling = self.model
        logits = transformer(features)["token_embeddings"]
        # Padding's logits become 0, as SpladePooling makes them; after ReLU a real token's are never below 0.
        maxima = (logits * attention_mask.unsqueeze(-1).to(logits.dtype)).amax(dim=1)
        vectors = torch.log1p(torch.relu(maxima))
        return torch.log1p(vectors) if pooling.activation_function == "log1p_relu" else vectors


@contextmanager
def eager_attention(model: SentenceTransformer | SparseEncoder):
    """The transformer with transformers' eager attention while it is traced: onnxruntime fuses that graph into its
    Attention kernels, not the one torch's scaled_dot_product_attention traces to."""
    transformer = model[0].auto_model
    implementation = transformer.config._attn_implementation
    transformer.set_attn_implementation("eager")
    try:
        yield
    finally:
        transformer.set_attn_implementation(implementation)


def export_graph(model: SentenceTransformer | SparseEncoder, path: Path) -> None:
    """Write `model`'s VectorGraph to `path` as one ONNX file with dynamic batch and sequence axes.

    With the TorchScript exporter: torch 2.13's torch.export-based one (its default) fixes the sequence axis of a
    BertForMaskedLM graph at the example's length, so SPLADE graphs would take one text length only."""
    example = model.preprocess(list(CHECK_TEXTS[:2]))
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES} | {OUTPUT_NAME: {0: "batch"}}
    with torch.no_grad(), eager_attention(model), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*TorchScript-based ONNX export")
        torch.onnx.export(
            VectorGraph(model).eval(), tuple(example[name] for name in INPUT_NAMES), str(path),
            input_names=list(INPUT_NAMES), output_names=[OUTPUT_NAME], dynamic_axes=axes, opset_version=OPSET,
            dynamo=False,
        )


def fuse_transformer_layers(model: SentenceTransformer | SparseEncoder, path: Path) -> dict[str, int]:
    """Rewrite the graph at `path` with onnxruntime's transformer fusions (attention, embedding + LayerNorm, bias +
    GELU, residual + LayerNorm as single kernels) where the model is of the BERT family they know; returns how many
    of each were fused (none for another architecture, whose graph stays as exported). On all-MiniLM-L6-v2 this made
    fp32 encoding 1.4x faster on 2 cores, vectors within 2e-7. The fused kernels are onnxruntime's own operators
    (domain com.microsoft): the graph runs on onnxruntime, as fastembed's and our loader's do."""
    from onnxruntime.transformers.optimizer import optimize_model

    config = model[0].auto_model.config
    if config.model_type not in FUSABLE_MODEL_TYPES:
        return {}
    # Quiet: its note (printed and logged) that symbolic shape inference failed; the fusions do not need it.
    with quiet_root_logger(), redirect_stdout(io.StringIO()):
        fused = optimize_model(
            str(path), model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size,
            opt_level=1,
        )
    fused.save_model_to_file(str(path))
    return {name: count for name, count in fused.get_fused_operator_statistics().items() if count}


@contextmanager
def quiet_root_logger():
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def quantize_int8(source: Path, target: Path) -> None:
    """onnxruntime's dynamic quantisation: int8 weights for the matrix products, one scale per output channel, and
    activations quantised per batch. One scale per weight matrix (its default) moved all-MiniLM-L6-v2's vectors to a
    mean cosine of 0.936 with fp32's on 128 SciFact abstracts; one per channel, to 0.995 at the same speed."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with quiet_root_logger():  # its advice to pre-process the graph first: tried, it changed neither vectors nor speed
        # A fused graph's outputs of onnxruntime's own operators have no ONNX type to infer: they are float.
        quantize_dynamic(
            str(source), str(target), weight_type=QuantType.QInt8, per_channel=True,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )


def vector_width(model: SentenceTransformer | SparseEncoder) -> int:
    """The length of the model's vectors: a SPLADE model's vocabulary (SpladePooling knows it only after a forward
    pass, and says the hidden size before), a dense model's embedding dimension."""
    if isinstance(model, SparseEncoder):
        return int(model[0].auto_model.get_output_embeddings().out_features)
    return int(model.get_embedding_dimension())


def onnx_config(model: SentenceTransformer | SparseEncoder, quantized: bool) -> dict:
    tokenizer = model.tokenizer
    sparse = isinstance(model, SparseEncoder)
    return {
        "kind": "sparse" if sparse else "dense",
        "model_file": MODEL_FILE,
        "int8_model_file": INT8_MODEL_FILE if quantized else None,
        "output_name": OUTPUT_NAME,
        "dimension": vector_width(model),
        "max_seq_length": model.max_seq_length,
        "pad_token": tokenizer.pad_token,
        "pad_token_id": tokenizer.pad_token_id,
        "query_prompt": resolved_prompt(model, ("query",)),
        "document_prompt": resolved_prompt(model, DOCUMENT_PROMPT_NAMES),
        "normalized": sparse is False and any(isinstance(module, Normalize) for module in model),
    }


def torch_vectors(model: SentenceTransformer | SparseEncoder, texts: list[str]) -> np.ndarray:
    """The model's own document vectors of `texts`, dense arrays (a sparse model's vocabulary-sized)."""
    vectors = model.encode_document(texts, convert_to_tensor=True)
    return (vectors.to_dense() if vectors.is_sparse else vectors).float().numpy()


def onnx_vectors(folder: Path, texts: list[str], quantized: bool = False) -> np.ndarray:
    """The exported graph's document vectors of `texts`, dense arrays (a sparse model's vocabulary-sized)."""
    encoder = onnx_encoder.OnnxEncoder(folder, quantized=quantized)
    vectors = encoder.encode_document(texts)
    if not encoder.sparse:
        return vectors
    dense = np.zeros((len(texts), encoder.config["dimension"]), dtype=np.float32)
    for row, (indices, weights) in enumerate(vectors):
        dense[row, indices] = weights
    return dense


def export_onnx(spec: str, output_dir: str, quantize: str | None = None, overwrite_output_dir: bool = False) -> float:
    """Write the retriever `spec` names to `output_dir` as ONNX (see the module's docstring); every input is checked
    before anything is written, and the folder appears whole or not at all. Returns the largest absolute difference
    between the fp32 graph's vectors and the model's own on CHECK_TEXTS."""
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise InputError(f"--quantize {quantize}: not one of {', '.join(QUANTIZATIONS)}.")
    form, path = split_model_spec(spec)
    if Path(output_dir).resolve() == Path(path).resolve():
        raise InputError(f"--output_dir {output_dir}: is the model folder itself. Choose another folder.")
    check_export_dir(output_dir, overwrite_output_dir)
    model = load_retriever(spec)
    check_exportable(model, spec)
    model.to("cpu")

    if overwrite_output_dir:
        clear_output_dir(output_dir)
    staged = staging_dir(output_dir)
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    export_graph(model, staged / MODEL_FILE)
    fused = fuse_transformer_layers(model, staged / MODEL_FILE)
    logger.info("Fused for onnxruntime: %s", ", ".join(f"{count} {name}" for name, count in fused.items()) or "nothing")
    if quantize == "int8":
        quantize_int8(staged / MODEL_FILE, staged / INT8_MODEL_FILE)
    model.tokenizer.save_pretrained(staged)
    # tokenizer_config.json's limit is where other ONNX tools (fastembed) truncate: the model's own max length.
    tokenizer_config = json.loads((staged / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer_config["model_max_length"] = model.max_seq_length
    (staged / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8")
    (staged / onnx_encoder.CONFIG_FILE).write_text(json.dumps(onnx_config(model, quantize is not None), indent=2) + "\n")
    shutil.copyfile(onnx_encoder.__file__, staged / LOADER_FILE)

    difference = float(np.abs(onnx_vectors(staged, list(CHECK_TEXTS)) - torch_vectors(model, list(CHECK_TEXTS))).max())
    if difference > TOLERANCE:
        shutil.rmtree(staged)
        raise RuntimeError(
            f"The ONNX graph's vectors differ from the model's by up to {difference:.2e} (> {TOLERANCE:.0e}); nothing "
            "was written. Please report this with the model folder."
        )
    # config.json last: its presence marks a whole folder (publish_final_model moves it after everything else).
    model[0].auto_model.config.save_pretrained(staged)
    publish_final_model(output_dir)
    return difference
