"""The package works outside its clone: a wheel built from the project carries every model card template
of `model_cards/`, and an installed (non-editable) copy renders the pretraining model card from its own
files, with no checkout in sight."""

import json
import shutil
import subprocess
import sys
import zipfile

import pytest

from pretrain_helpers import REPO_ROOT, subprocess_env

# What setup.py builds the package from.
PACKAGE_SOURCES = ["setup.py", "README.md", "modeling_seed", "training", "model_cards"]


def pip(*arguments) -> None:
    result = subprocess.run([sys.executable, "-m", "pip", *map(str, arguments)], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def wheel_and_site(tmp_path_factory):
    """A wheel built from a copy of the project (no build outputs land in the checkout), and the folder
    it is installed into with `pip install --target`."""
    root = tmp_path_factory.mktemp("packaging")
    source = root / "source"
    source.mkdir()
    for name in PACKAGE_SOURCES:
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(REPO_ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO_ROOT / name, source / name)
    pip("wheel", "--no-deps", "--no-build-isolation", "--quiet", "--wheel-dir", root / "wheel", source)
    [wheel] = (root / "wheel").glob("*.whl")
    pip("install", "--no-deps", "--quiet", "--target", root / "site", wheel)
    return wheel, root / "site"


def test_wheel_ships_every_model_card_template(wheel_and_site):
    wheel, _ = wheel_and_site
    templates = sorted(path.name for path in (REPO_ROOT / "model_cards").glob("*.md"))

    with zipfile.ZipFile(wheel) as archive:
        shipped = sorted(name.removeprefix("training/model_cards/") for name in archive.namelist()
                         if name.startswith("training/model_cards/"))

    assert "seed_encoder.md" in templates
    assert shipped == templates


def test_installed_copy_renders_the_pretraining_model_card_from_its_own_template(wheel_and_site, tmp_path):
    _, site = wheel_and_site
    program = (
        "import json, sys\n"
        "import training\n"
        "from modeling_seed import SeedEncoderConfig\n"
        "from training.pretraining.arguments import SeedPretrainingArguments\n"
        "from training.pretraining.model_card import render_model_card\n"
        "card = render_model_card(\n"
        "    config=SeedEncoderConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128),\n"
        "    log_history=[{'step': 1, 'loss': 9.5, 'mlm_loss': 5.25, 'decoder_loss': 4.25}],\n"
        "    train_metrics={'global_step': 1, 'epoch': 0.5, 'train_runtime': 3.0},\n"
        "    training_args=SeedPretrainingArguments(output_dir=sys.argv[1], report_to='none'),\n"
        "    data_description='`corpus.txt`', max_seq_length=32, train_samples=16, warm_start=None,\n"
        "    base_model=None,\n"
        "    repo_id='installed-card', command=['training/pretrain.py'],\n"
        ")\n"
        "print(json.dumps({'package': training.__file__, 'card': str(card)}))\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path / "out")], cwd=tmp_path, env=subprocess_env(PYTHONPATH=str(site)),
        capture_output=True, text=True, timeout=120,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    rendered = json.loads(result.stdout.strip().splitlines()[-1])
    assert rendered["package"] == str(site / "training" / "__init__.py")
    card = rendered["card"]
    assert card.startswith("---\n") and "\n# installed-card\n" in card
    assert "| train (last log) | 9.5 | 5.25 | 4.25 |" in card
    assert "- Steps: 1 (0.50 epochs), 16 training sequences of at most 32 tokens" in card
