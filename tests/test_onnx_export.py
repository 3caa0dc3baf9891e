"""`training/export.py --onnx`: a dense or SPLADE retriever becomes an ONNX graph whose output is its vector, and the
folder's `onnx_encoder.py` runs it with onnxruntime, tokenizers and numpy alone, giving sentence-transformers'
vectors: the same tokens, truncation, prompts, pooling and normalisation."""

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from sentence_transformers import CrossEncoder, SentenceTransformer, SparseEncoder

from conftest import unavailable
from plain_environment import ONNX_REQUIREMENTS, plain_environment, run_in
from training.export import main as export
from training.onnx_serving.encoder import OnnxEncoder

LONG_TEXT = " ".join(["Mutations in the gene raised the risk of disease in every cohort that was studied."] * 40)
# Mixed lengths in one batch (padding), one text beyond every max length (truncation), stray spaces and capitals.
TEXTS = ["Aspirin inhibits platelet aggregation.", LONG_TEXT, "  What causes OBESITY?  ", "cells", ""]
PROMPTS = {"query": "query: ", "document": "passage: "}
DENSE_LENGTH = 128  # not the tokenizer's 512: the loader must truncate where the model does


def dense_vectors(vectors: list[tuple[np.ndarray, np.ndarray]], width: int) -> np.ndarray:
    rows = np.zeros((len(vectors), width), dtype=np.float32)
    for row, (indices, weights) in enumerate(vectors):
        rows[row, indices] = weights
    return rows


def max_difference(onnx_vectors, torch_vectors) -> float:
    torch_vectors = torch_vectors.to_dense() if torch_vectors.is_sparse else torch_vectors
    return float(np.abs(np.asarray(onnx_vectors) - torch_vectors.numpy()).max())


@pytest.fixture(scope="module")
def dense_start(minilm_dir, tmp_path_factory) -> Path:
    """all-MiniLM-L6-v2 with query and document prompts, served at 128 tokens."""
    model = SentenceTransformer(str(minilm_dir), device="cpu")
    model.prompts = dict(PROMPTS)
    model.max_seq_length = DENSE_LENGTH
    folder = tmp_path_factory.mktemp("dense-start") / "minilm-prompted"
    model.save(str(folder))
    return folder


@pytest.fixture(scope="module")
def dense_export(dense_start, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("onnx") / "dense"
    assert export([str(dense_start), "--onnx", "--quantize", "int8", "--output_dir", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def sparse_export(splade_tiny_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("onnx") / "sparse"
    assert export([f"sparse:{splade_tiny_dir}", "--onnx", "--quantize", "int8", "--output_dir", str(out)]) == 0
    return out


@pytest.mark.slow
def test_the_dense_graph_gives_sentence_transformers_query_and_document_vectors(dense_export, dense_start):
    model = SentenceTransformer(str(dense_start), device="cpu")
    encoder = OnnxEncoder(dense_export)

    queries, documents = encoder.encode_query(TEXTS, batch_size=4), encoder.encode_document(TEXTS, batch_size=4)

    assert max_difference(queries, model.encode_query(TEXTS, convert_to_tensor=True)) <= 1e-4
    assert max_difference(documents, model.encode_document(TEXTS, convert_to_tensor=True)) <= 1e-4
    assert np.abs(queries - documents).max() > 1e-2  # the prompts were applied, each to its side
    assert np.allclose(np.linalg.norm(documents, axis=1), 1, atol=1e-5)  # normalised in the graph


@pytest.mark.slow
def test_the_sparse_graph_gives_the_sparse_encoders_vocabulary_vectors(sparse_export, splade_tiny_dir):
    model = SparseEncoder(str(splade_tiny_dir), device="cpu")
    encoder = OnnxEncoder(sparse_export)

    documents = encoder.encode_document(TEXTS, batch_size=3)
    reference = model.encode_document(TEXTS, convert_to_tensor=True).to_dense()

    assert max_difference(dense_vectors(documents, 30522), reference) <= 1e-4
    for (indices, weights), row in zip(documents, reference):
        assert indices.tolist() == row.nonzero().flatten().tolist() and (weights > 0).all()


@pytest.mark.slow
def test_the_folder_holds_what_a_loader_needs_and_both_axes_are_dynamic(dense_export, sparse_export):
    dense = json.loads((dense_export / "onnx_config.json").read_text())
    sparse = json.loads((sparse_export / "onnx_config.json").read_text())
    graph = onnx.load(str(dense_export / "model.onnx")).graph

    assert {key: dense[key] for key in ("kind", "dimension", "max_seq_length", "query_prompt", "document_prompt",
                                        "normalized")} == {
        "kind": "dense", "dimension": 384, "max_seq_length": DENSE_LENGTH, "query_prompt": "query: ",
        "document_prompt": "passage: ", "normalized": True,
    }
    assert (sparse["kind"], sparse["dimension"], sparse["max_seq_length"]) == ("sparse", 30522, 512)
    # Other ONNX tools (fastembed) truncate at tokenizer_config.json's limit.
    assert json.loads((dense_export / "tokenizer_config.json").read_text())["model_max_length"] == DENSE_LENGTH
    assert {path.name for path in dense_export.iterdir()} >= {
        "model.onnx", "model_int8.onnx", "tokenizer.json", "onnx_config.json", "onnx_encoder.py", "config.json"
    }
    assert [[dim.dim_param for dim in graph_input.type.tensor_type.shape.dim] for graph_input in graph.input] == [
        ["batch", "sequence"]
    ] * 3


@pytest.mark.slow
def test_every_layers_attention_runs_as_one_onnxruntime_kernel(dense_export, sparse_export):
    """Traced from eager attention, which onnxruntime fuses (1.4x faster on 2 cores); torch's SDPA trace it does not."""
    for folder, layers in ((dense_export, 6), (sparse_export, 2)):
        for model_file in ("model.onnx", "model_int8.onnx"):
            operators = [node.op_type for node in onnx.load(str(folder / model_file)).graph.node]
            assert operators.count("Attention") + operators.count("QAttention") == layers, (folder.name, model_file)


@pytest.mark.slow
def test_the_int8_graphs_stay_close_to_fp32(dense_export, sparse_export):
    """One scale per weight channel: with one per matrix, the dense cosines fell to about 0.94."""
    for folder in (dense_export, sparse_export):
        fp32, int8 = (OnnxEncoder(folder, quantized=quantized).encode_document(TEXTS[:4]) for quantized in (False, True))
        if isinstance(fp32, list):
            fp32, int8 = dense_vectors(fp32, 30522), dense_vectors(int8, 30522)
        cosines = np.sum(fp32 * int8, axis=1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(int8, axis=1)
        assert cosines.min() >= 0.98, (folder.name, cosines)


@pytest.mark.slow
def test_the_loader_runs_where_only_onnxruntime_tokenizers_and_numpy_are_installed(
    dense_export, sparse_export, dense_start, splade_tiny_dir, tmp_path
):
    python = plain_environment(tmp_path / "venv", ONNX_REQUIREMENTS)
    program = (
        "import importlib.util, json, sys\n"
        "assert importlib.util.find_spec('torch') is None and importlib.util.find_spec('training') is None\n"
        "found = {}\n"
        f"for folder in {[str(dense_export), str(sparse_export)]!r}:\n"
        "    sys.path.insert(0, folder)\n"
        "    from onnx_encoder import OnnxEncoder\n"
        "    vectors = OnnxEncoder(folder).encode_document(" + repr(TEXTS) + ")\n"
        "    found[folder] = vectors.tolist() if hasattr(vectors, 'tolist') else "
        "[[indices.tolist(), weights.tolist()] for indices, weights in vectors]\n"
        "    sys.path.pop(0); sys.modules.pop('onnx_encoder')\n"
        "print(json.dumps(found))\n"
    )
    found = run_in(python, program, tmp_path)

    dense = SentenceTransformer(str(dense_start), device="cpu").encode_document(TEXTS, convert_to_tensor=True)
    sparse = SparseEncoder(str(splade_tiny_dir), device="cpu").encode_document(TEXTS, convert_to_tensor=True)
    assert max_difference(found[str(dense_export)], dense) <= 1e-4
    sparse_found = [(np.array(indices, dtype=int), np.array(weights)) for indices, weights in found[str(sparse_export)]]
    assert max_difference(dense_vectors(sparse_found, 30522), sparse) <= 1e-4


@pytest.mark.slow
def test_fastembed_loads_the_dense_folder_offline_and_gives_its_vectors(dense_export, dense_start, tmp_path):
    """fastembed needs huggingface-hub < 2, transformers 5 needs >= 2.4: it runs in an environment of its own
    (.ci/run makes one and names its python in FASTEMBED_PYTHON)."""
    python = os.environ.get("FASTEMBED_PYTHON")
    if not python:
        unavailable("FASTEMBED_PYTHON (the python of an environment with fastembed) is not set")
    program = (
        "import json\n"
        "from fastembed import TextEmbedding\n"
        "from fastembed.common.model_description import ModelSource, PoolingType\n"
        "TextEmbedding.add_custom_model(model='local/retriever', pooling=PoolingType.DISABLED, normalization=False,\n"
        "    sources=ModelSource(hf='local/retriever'), dim=384, model_file='model.onnx',\n"
        "    output_name='sentence_embedding')\n"
        f"model = TextEmbedding('local/retriever', specific_model_path={str(dense_export)!r})\n"
        f"print(json.dumps([vector.tolist() for vector in model.embed({TEXTS!r})]))\n"
    )
    found = run_in(Path(python), program, tmp_path)

    # fastembed adds no prompt: the model's encode() without one
    reference = SentenceTransformer(str(dense_start), device="cpu").encode(TEXTS, convert_to_tensor=True)
    assert max_difference(found, reference) <= 1e-4


def test_a_bare_checkpoint_is_refused_until_told_how_to_pool_it(splade_tiny_dir, tmp_path, capsys):
    assert export([str(splade_tiny_dir), "--onnx", "--output_dir", str(tmp_path / "out")]) == 2
    assert f"Pass sparse:{splade_tiny_dir} to export it as SPLADE" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_not_a_retriever_is_refused_with_status_2_and_no_traceback(minilm_dir, tmp_path, capsys):
    """In this process: test_export.py runs the script itself for the exit status a user gets."""
    cross_encoder = tmp_path / "reranker"
    CrossEncoder(str(minilm_dir), num_labels=1, device="cpu").save(str(cross_encoder))

    status = export([str(cross_encoder), "--onnx", "--output_dir", str(tmp_path / "out")])
    error = capsys.readouterr().err

    assert status == 2
    assert f"error: {cross_encoder}: a cross-encoder folder, not a retriever." in error
    assert "Traceback" not in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--quantize", "int8"], "--quantize int8: quantisation is for ONNX export. Add --onnx."),
        (["--onnx", "--output_dir", "{file}"], "is a file. Choose a folder."),
        (["--onnx", "--output_dir", "{taken}"], "the folder is not empty (notes.txt)"),
    ],
)
def test_bad_flags_are_refused_before_any_work(minilm_dir, tmp_path, capsys, arguments, message):
    (tmp_path / "a-file").write_text("")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    paths = {"file": tmp_path / "a-file", "taken": tmp_path / "taken"}

    assert export([str(minilm_dir), *[argument.format(**paths) for argument in arguments]]) == 2
    assert message in capsys.readouterr().err
    assert [path.name for path in (tmp_path / "taken").iterdir()] == ["notes.txt"]
