"""The README's main job, exactly as a new user types it: `accelerate launch training/pretrain.py` with no
arguments, on a machine without network, writes a working `./seed-encoder` within minutes on two CPU cores."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining, AutoTokenizer

import modeling_seed  # noqa: F401  (registers SEED with the Auto classes)

REPO_ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB_BUDGET_SECONDS = 15 * 60


@pytest.fixture(scope="module")
def main_job(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("fresh_checkout_user")
    accelerate = Path(sys.executable).with_name("accelerate")
    started = time.monotonic()
    finished = subprocess.run(
        [str(accelerate), "launch", str(REPO_ROOT / "training" / "pretrain.py")],
        cwd=workdir, capture_output=True, text=True, timeout=MAIN_JOB_BUDGET_SECONDS,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )
    elapsed = time.monotonic() - started
    print(f"main job: {elapsed:.0f} s")
    return finished, workdir / "seed-encoder", elapsed


def test_main_job_exits_cleanly_and_writes_seed_encoder(main_job):
    finished, output_dir, _ = main_job

    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "SEED-Encoder written to seed-encoder" in finished.stdout
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md", "loss_curves.png"} <= {
        path.name for path in output_dir.iterdir()
    }


def test_main_job_lowers_both_losses_on_the_bundled_python_docs(main_job):
    _, output_dir, _ = main_job
    log = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    train_logs = [entry for entry in log if "mlm_loss" in entry]

    first, last = train_logs[0], train_logs[-1]
    assert last["mlm_loss"] < first["mlm_loss"] - 1.0
    assert last["decoder_loss"] < first["decoder_loss"] - 1.0
    assert "pydoc_data" in (output_dir / "README.md").read_text()


def test_main_job_output_loads_as_encoder_masked_lm_and_pretraining_model(main_job):
    _, output_dir, _ = main_job
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    batch = tokenizer(["a list comprehension builds a list", "the with statement"], padding=True, return_tensors="pt")

    encoder = AutoModel.from_pretrained(output_dir).eval()
    masked_lm = AutoModelForMaskedLM.from_pretrained(output_dir).eval()
    pretraining = AutoModelForPreTraining.from_pretrained(output_dir).eval()
    with torch.no_grad():
        cls_vectors = encoder(**batch).pooler_output

    assert type(encoder).__name__ == "SeedEncoderModel"
    assert cls_vectors.shape == (2, encoder.config.hidden_size)
    assert masked_lm(**batch).logits.shape[-1] == encoder.config.vocab_size
    assert pretraining.weak_decoder is not None
    assert torch.equal(pretraining.bert.embeddings.word_embeddings.weight, encoder.embeddings.word_embeddings.weight)


def test_main_job_output_encodes_with_sentence_transformers(main_job):
    _, output_dir, _ = main_job
    transformer = Transformer(str(output_dir))
    model = SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension(), "cls")])

    embeddings = model.encode(["decorators wrap functions", "generators yield values"])

    assert embeddings.shape == (2, transformer.get_embedding_dimension())
    assert not torch.allclose(torch.tensor(embeddings[0]), torch.tensor(embeddings[1]))
