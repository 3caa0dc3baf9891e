"""`training/export.py`: a SEED pretraining folder's encoder and MLM head become a plain `BertForMaskedLM` folder,
which transformers loads without this package or remote code and which computes the SEED model's logits."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from finetune_helpers import PROBE_TEXTS
from modeling_seed import SeedEncoderForMaskedLM
from plain_environment import run_in
from training.common.errors import InputError
from training.export import main as export
from training.pretraining.bert_export import export_plain_bert

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def exported(tiny_seed_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "seed-bert"
    assert export([str(tiny_seed_dir), "--output_dir", str(out)]) == 0
    return out


def test_export_is_plain_bert_for_masked_lm_with_its_tokenizer_and_card_and_no_code(exported, tiny_seed_dir):
    config = json.loads((exported / "config.json").read_text())

    assert (config["model_type"], config["architectures"], "auto_map" in config) == ("bert", ["BertForMaskedLM"], False)
    assert not any(key.startswith("decoder_") for key in config)
    assert not list(exported.rglob("*.py"))
    assert {"model.safetensors", "tokenizer.json", "README.md"} <= {path.name for path in exported.iterdir()}
    card = (exported / "README.md").read_text()
    assert f"Exported from: `{tiny_seed_dir}`" in card and "weak decoder of 3 layers and attention span 2" in card


def test_export_gives_the_seed_models_logits_where_seed_encoder_is_not_installed(exported, tiny_seed_dir, plain_python, tmp_path):
    program = (
        "import importlib.util, json, torch\n"
        "assert importlib.util.find_spec('modeling_seed') is None, 'seed-encoder is importable here'\n"
        "from transformers import AutoModelForMaskedLM, AutoTokenizer\n"
        f"model = AutoModelForMaskedLM.from_pretrained({str(exported)!r}).eval()\n"
        f"batch = AutoTokenizer.from_pretrained({str(exported)!r})({PROBE_TEXTS!r}, padding=True, return_tensors='pt')\n"
        "with torch.no_grad():\n"
        "    logits = model(**batch).logits\n"
        "print(json.dumps({'class': type(model).__name__, 'logits': logits.tolist()}))\n"
    )
    elsewhere = run_in(plain_python, program, tmp_path)
    seed = SeedEncoderForMaskedLM.from_pretrained(tiny_seed_dir).eval()
    batch = AutoTokenizer.from_pretrained(tiny_seed_dir)(PROBE_TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = seed(**batch).logits

    assert elsewhere["class"] == "BertForMaskedLM"
    assert torch.allclose(torch.tensor(elsewhere["logits"]), expected, atol=1e-6, rtol=0)


def test_export_refuses_a_folder_without_a_seed_checkpoint_with_status_2_and_writes_nothing(exported, tmp_path):
    """The export of an export: a bert folder, not SEED. Run as a user runs it, for the exit status."""
    out = tmp_path / "again"
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "training" / "export.py"), str(exported), "--output_dir", str(out)],
        capture_output=True, text=True, timeout=120,
    )

    assert result.returncode == 2
    assert f"error: {exported}: not a SEED pretraining checkpoint (model_type 'bert'" in result.stderr
    assert not out.exists()


def test_export_refuses_a_seed_encoder_saved_without_its_mlm_head(tiny_seed_dir, tmp_path):
    encoder_only = tmp_path / "encoder-only"
    SeedEncoderForMaskedLM.from_pretrained(tiny_seed_dir).bert.save_pretrained(encoder_only)

    with pytest.raises(InputError, match="saved as an encoder alone"):
        export_plain_bert(str(encoder_only), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_export_refuses_a_non_empty_output_folder_unless_told_to_overwrite(tiny_seed_dir, tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")

    assert export([str(tiny_seed_dir), "--output_dir", str(out)]) == 2
    assert "the folder is not empty (notes.txt)" in capsys.readouterr().err
    assert export([str(tiny_seed_dir), "--output_dir", str(out), "--overwrite_output_dir"]) == 0
    assert not (out / "notes.txt").exists() and (out / "config.json").is_file()


@pytest.mark.parametrize("where", ["a file", "a folder nothing can be written in"])
def test_export_refuses_an_output_dir_it_cannot_write_before_any_work(tiny_seed_dir, tmp_path, capsys, where):
    if where == "a file":
        out = tmp_path / "notes.txt"
        out.write_text("mine")
        expected = f"error: --output_dir {out}: is a file. Choose a folder."
    else:
        out = Path("/proc/seed-bert")  # not even root writes there
        expected = "error: --output_dir /proc/seed-bert: cannot write in /proc ("

    assert export([str(tiny_seed_dir), "--output_dir", str(out)]) == 2

    error = capsys.readouterr().err
    assert error.startswith(expected) and "Traceback" not in error
    assert where == "a folder nothing can be written in" or out.read_text() == "mine"
