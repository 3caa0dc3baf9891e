"""`--decoder_learning_rate`: in a warm start from a trained BERT the weak decoder is new and the encoder is not, so the
decoder's own weights train at their own, higher rate (by default 10x the encoder's), read here from the optimizer's
parameter groups, also behind torch.compile and FSDP (which must keep the original parameters); and a short warm run
lowers the decoder loss more than the same run at the encoder's rate."""

import json
import subprocess
import sys

import pytest
import torch

from pretrain_helpers import REPO_ROOT, free_port, pretrain, subprocess_env
from training.pretraining.arguments import WARM_START_DECODER_LR_FACTOR

ENCODER_RATE = 3e-4
WARM_RUN = [
    "--max_train_samples", "160", "--per_device_train_batch_size", "16", "--max_seq_length", "64",
    "--max_steps", "6", "--warmup_steps", "0", "--learning_rate", ENCODER_RATE, "--validation_split_percentage", "0",
    "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none", "--dataloader_pin_memory", "false",
]
LAST_STEPS = 3  # the decoder loss compared: the mean over the run's last steps


@pytest.fixture(scope="module")
def warm_runs(splade_tiny_dir, scifact_slice, tmp_path_factory):
    """The same short warm start from splade-tiny twice: the decoder at its default rate, and at the encoder's."""
    folder = tmp_path_factory.mktemp("decoder-rate")
    runs = {}
    for name, flags in (("default", []), ("encoder rate", ["--decoder_learning_rate", ENCODER_RATE])):
        output = folder / name.replace(" ", "-")
        status = pretrain([
            "--model_name_or_path", splade_tiny_dir, "--train_file", scifact_slice / "corpus.jsonl",
            "--output_dir", output, *WARM_RUN, *flags,
        ])
        assert status == 0
        runs[name] = output
    return runs


def decoder_losses(output) -> list[float]:
    history = json.loads((output / "trainer_state.json").read_text())["log_history"]
    return [entry["decoder_loss"] for entry in history if "decoder_loss" in entry]


@pytest.mark.slow
def test_a_warm_start_trains_the_decoder_at_ten_times_the_encoders_rate_by_default(warm_runs):
    arguments = torch.load(warm_runs["default"] / "training_args.bin", weights_only=False)

    assert arguments.learning_rate == ENCODER_RATE
    assert arguments.decoder_learning_rate == pytest.approx(WARM_START_DECODER_LR_FACTOR * ENCODER_RATE)


@pytest.mark.parametrize("wrapped", [False, True], ids=["as-built", "compiled"])
def test_the_decoders_own_weights_and_only_they_are_in_the_decoder_rate_groups(splade_tiny_dir, tmp_path, wrapped):
    """Also on a wrapped model, whose parameter names the wrapper prefixes (torch.compile: `_orig_mod.`; DDP and
    FSDP do the same), as the Trainer hands it to `create_optimizer` under FSDP."""
    from transformers import AutoTokenizer

    from modeling_seed import SeedEncoderForPreTraining
    from training.pretraining.arguments import SeedPretrainingArguments
    from training.pretraining.trainer import SeedPretrainingTrainer

    model = SeedEncoderForPreTraining.from_bert(str(splade_tiny_dir))
    arguments = SeedPretrainingArguments(
        output_dir=str(tmp_path), learning_rate=1e-4, decoder_learning_rate=2e-3, weight_decay=0.01, report_to="none",
    )
    trainer = SeedPretrainingTrainer(model=model, args=arguments, processing_class=AutoTokenizer.from_pretrained(splade_tiny_dir))

    groups = trainer.create_optimizer(torch.compile(model) if wrapped else None).param_groups

    rate_of = {id(parameter): group["lr"] for group in groups for parameter in group["params"]}
    decay_of = {id(parameter): group["weight_decay"] for group in groups for parameter in group["params"]}
    decoder = model.weak_decoder
    shared = decoder.embeddings.word_embeddings.weight  # the encoder's word embeddings, tied
    assert shared is model.bert.embeddings.word_embeddings.weight and rate_of[id(shared)] == 1e-4
    decoder_own = [parameter for parameter in decoder.parameters() if parameter is not shared]
    assert decoder_own and all(rate_of[id(parameter)] == 2e-3 for parameter in decoder_own)
    encoder = [parameter for name, parameter in model.named_parameters() if not name.startswith("weak_decoder.")]
    assert all(rate_of[id(parameter)] == 1e-4 for parameter in encoder)
    assert len(rate_of) == len(list(model.parameters()))  # every trained weight, once
    # Weight decay grouped as the Trainer groups it: none on biases and LayerNorm weights, in the decoder too.
    assert decay_of[id(decoder.layer[0].attention.self.query.weight)] == 0.01
    assert decay_of[id(decoder.layer[0].attention.self.query.bias)] == 0.0
    assert groups[0]["lr"] == 1e-4  # the Trainer logs the first group's rate: the encoder's


# Real FSDP (gloo, one CPU process; the world size of one makes it NO_SHARD, which still flattens unless told not
# to), in a process of its own so that the process group and Accelerate's state stay out of the other tests.
FSDP_PROGRAM = """
import json, sys, torch, torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from transformers import AutoTokenizer
from modeling_seed import SeedEncoderForPreTraining
from training.pretraining.arguments import SeedPretrainingArguments
from training.pretraining.trainer import SeedPretrainingTrainer

start, output = sys.argv[1:]
dist.init_process_group("gloo", rank=0, world_size=1)
report = {}
for use_orig_params in (False, True):
    model = SeedEncoderForPreTraining.from_bert(start)
    wrapped = FSDP(model, device_id=torch.device("cpu"), use_orig_params=use_orig_params)
    arguments = SeedPretrainingArguments(output_dir=output, learning_rate=1e-4, decoder_learning_rate=2e-3, report_to="none")
    trainer = SeedPretrainingTrainer(model=model, args=arguments, processing_class=AutoTokenizer.from_pretrained(start))
    try:
        groups = trainer.create_optimizer(wrapped).param_groups
    except ValueError as error:
        report[str(use_orig_params)] = str(error)
        continue
    rate_of = {id(parameter): group["lr"] for group in groups for parameter in group["params"]}
    report[str(use_orig_params)] = {
        name: rate_of[id(parameter)] for name, parameter in wrapped.named_parameters() if id(parameter) in rate_of
    }
dist.destroy_process_group()
print(json.dumps(report))
"""


@pytest.mark.slow
def test_under_fsdp_original_parameters_keep_the_decoders_rate_and_flattened_ones_are_refused(splade_tiny_dir, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", FSDP_PROGRAM, str(splade_tiny_dir), str(tmp_path)], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=240,
        env=subprocess_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), PYTHONPATH=str(REPO_ROOT)),
    )

    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    flattened, original = report["False"], report["True"]
    assert "--decoder_learning_rate" in flattened and "fsdp_use_orig_params true" in flattened
    decoder = {rate for name, rate in original.items() if ".weak_decoder." in name}
    encoder = {rate for name, rate in original.items() if ".weak_decoder." not in name}
    assert decoder == {2e-3} and encoder == {1e-4}


def test_a_short_warm_run_lowers_the_decoder_loss_more_at_the_decoders_own_rate(warm_runs):
    default, encoder_rate = decoder_losses(warm_runs["default"]), decoder_losses(warm_runs["encoder rate"])

    assert default[0] == pytest.approx(encoder_rate[0], abs=1e-3)  # the same start: same seed, same fresh decoder
    assert sum(default[-LAST_STEPS:]) / LAST_STEPS < sum(encoder_rate[-LAST_STEPS:]) / LAST_STEPS - 0.3
