"""`training/pretrain.py --model_name_or_path` on a SentenceTransformer folder (all-MiniLM-L6-v2): the encoder starts
from its Transformer's weights, all of them; its pooling says which vector the decoder reads; the MLM head, which it
lacks, starts fresh and is reported; with --freeze_encoder only the new heads train, and a run continuing that one
trains everything; and the pretraining folder retrieves as the start did, with its pooling and normalisation."""

import json
import logging
import shutil

import pytest
import torch
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling
from transformers import AutoModel, BertModel

from finetune_helpers import PROBE_TEXTS, encoded_in_plain_environment, plain_bert_files
from modeling_seed import SeedEncoderConfig, SeedEncoderForPreTraining
from pretrain_helpers import max_abs_difference, pretrain, weights
from training.common.models import load_sentence_transformer
from training.export import main as export

TINY_WARM_RUN = [
    "--max_train_samples", "16", "--max_seq_length", "32", "--per_device_train_batch_size", "4", "--max_steps", "2",
    "--save_strategy", "no", "--validation_split_percentage", "0", "--report_to", "none",
    "--dataloader_pin_memory", "false",
]


@pytest.fixture(scope="module")
def adapted(minilm_dir, scifact_slice, tmp_path_factory):
    """Two steps of SEED pretraining from all-MiniLM-L6-v2 on the slice's abstracts."""
    out = tmp_path_factory.mktemp("adapted") / "minilm-seed"
    assert pretrain([
        "--model_name_or_path", minilm_dir, "--train_file", scifact_slice / "corpus.jsonl", "--output_dir", out,
        *TINY_WARM_RUN,
    ]) == 0
    return out


class Recorded(logging.Handler):
    """What a logger passes on to its handlers, after its own filters."""

    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_the_encoder_starts_from_every_weight_of_the_sentence_transformer_and_the_new_head_is_reported(
    minilm_dir, caplog
):
    config = SeedEncoderConfig.from_bert_config(json.loads((minilm_dir / "config.json").read_text()))
    transformers_loading = Recorded()
    logging.getLogger("transformers.modeling_utils").addHandler(transformers_loading)  # it does not propagate to caplog
    try:
        with caplog.at_level(logging.WARNING):
            model = SeedEncoderForPreTraining.from_encoder_checkpoint(str(minilm_dir), config)
    finally:
        logging.getLogger("transformers.modeling_utils").removeHandler(transformers_loading)
    start = BertModel.from_pretrained(minilm_dir).state_dict()
    encoder = model.bert.state_dict()

    assert set(encoder) == {name for name in start if not name.startswith("pooler.")}
    assert all(torch.equal(encoder[name], start[name]) for name in encoder)
    assert f"{minilm_dir} holds no MLM head" in caplog.text
    # transformers' own words for a checkpoint without a head, which is not corrupted
    assert not [message for message in transformers_loading.messages if "corrupted" in message]
    assert torch.count_nonzero(model.cls.predictions.bias) == 0
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight


def test_the_decoder_reads_the_mean_the_start_retrieves_with(adapted):
    assert SeedEncoderConfig.from_pretrained(adapted).decoder_condition == "mean"
    assert "`decoder_condition: mean`" in (adapted / "README.md").read_text()


def test_the_pretraining_folder_retrieves_with_the_starts_pooling_and_normalisation(adapted, minilm_dir):
    model = load_sentence_transformer(str(adapted))
    vectors = model.encode(["a query about cells", "a passage about proteins"], convert_to_tensor=True)

    assert [type(module) for module in model][1:] == [Pooling, Normalize]
    assert model[1].pooling_mode == "mean" and type(model[0].auto_model) is BertModel
    assert torch.allclose(vectors.norm(dim=-1), torch.ones(2), atol=1e-5)
    assert type(AutoModel.from_pretrained(adapted)).__name__ == "SeedEncoderModel"  # still a SEED checkpoint


def test_decoder_condition_flag_overrides_the_starts_pooling(minilm_dir, scifact_slice, tmp_path):
    out = tmp_path / "cls"
    assert pretrain([
        "--model_name_or_path", minilm_dir, "--train_file", scifact_slice / "corpus.jsonl", "--output_dir", out,
        *TINY_WARM_RUN, "--decoder_condition", "cls",
    ]) == 0

    assert SeedEncoderConfig.from_pretrained(out).decoder_condition == "cls"
    assert load_sentence_transformer(str(out))[1].pooling_mode == "mean"  # it still retrieves as the start did


def test_a_pooling_the_decoder_cannot_read_is_refused_naming_the_flag(minilm_dir, scifact_slice, tmp_path, capsys):
    start = tmp_path / "max-pooled"
    shutil.copytree(minilm_dir, start)
    (start / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 384, "pooling_mode": "max"}))

    assert pretrain([
        "--model_name_or_path", start, "--train_file", scifact_slice / "corpus.jsonl", "--output_dir", tmp_path / "out",
        *TINY_WARM_RUN,
    ]) == 2
    assert "a SentenceTransformer with max pooling" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_freeze_encoder_trains_only_the_new_heads_on_the_encoder_as_it_starts(minilm_dir, scifact_slice, tmp_path):
    out = tmp_path / "heads"
    assert pretrain([
        "--model_name_or_path", minilm_dir, "--train_file", scifact_slice / "corpus.jsonl", "--output_dir", out,
        *TINY_WARM_RUN, "--freeze_encoder", "--learning_rate", "1e-3", "--save_strategy", "steps", "--save_steps", "2",
    ]) == 0
    start = BertModel.from_pretrained(minilm_dir).state_dict()
    trained = weights(out)
    encoder = {name.removeprefix("bert."): tensor for name, tensor in trained.items() if name.startswith("bert.")}

    assert set(encoder) == {name for name in start if not name.startswith("pooler.")}
    assert all(torch.equal(encoder[name], start[name]) for name in encoder)
    # The heads did train: the MLM bias starts at 0 and the decoder's layer norms at 1.
    assert torch.count_nonzero(trained["cls.predictions.bias"]) > 0
    norms = [tensor for name, tensor in trained.items() if name.startswith("weak_decoder.") and name.endswith("LayerNorm.weight")]
    assert norms and all(not torch.equal(norm, torch.ones_like(norm)) for norm in norms)
    assert "Encoder frozen (`--freeze_encoder`)" in (out / "README.md").read_text()

    continued = tmp_path / "continued"
    assert pretrain([
        "--model_name_or_path", out, "--train_file", scifact_slice / "corpus.jsonl", "--output_dir", continued,
        *TINY_WARM_RUN,
    ]) == 0
    card = (continued / "README.md").read_text()
    assert f"continuing the SEED checkpoint `{out}`" in card and "Encoder frozen" not in card
    assert max_abs_difference(
        {name: tensor for name, tensor in weights(continued).items() if name.startswith("bert.")},
        {f"bert.{name}": tensor for name, tensor in encoder.items()},
    ) > 0  # without the flag the encoder trains


def test_resuming_a_frozen_run_without_the_flag_is_refused_naming_the_way_to_train_everything(
    minilm_dir, scifact_slice, tmp_path, capsys
):
    out = tmp_path / "heads"
    flags = ["--model_name_or_path", minilm_dir, "--train_file", scifact_slice / "corpus.jsonl", "--output_dir", out,
             *TINY_WARM_RUN, "--save_strategy", "steps", "--save_steps", "1", "--max_steps", "1"]
    assert pretrain([*flags, "--freeze_encoder"]) == 0
    before = weights(out)

    assert pretrain([*flags, "--max_steps", "2"]) == 2

    error = capsys.readouterr().err
    assert f"Cannot resume {out / 'checkpoint-1'}: it was trained with --freeze_encoder and this run is without it" in error
    assert "start a new --output_dir from the frozen run's folder" in error
    assert max_abs_difference(weights(out), before) == 0


def test_freeze_encoder_without_a_trained_encoder_is_refused_before_anything_is_written(scifact_slice, tmp_path, capsys):
    assert pretrain([
        "--config_name", "seed-tiny", "--train_file", scifact_slice / "corpus.jsonl", "--output_dir", tmp_path / "out",
        *TINY_WARM_RUN, "--freeze_encoder",
    ]) == 2
    assert "--freeze_encoder keeps the encoder as it starts, and a new model's encoder is random" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_its_export_is_a_plain_bert_sentence_transformer_that_loads_where_seed_encoder_is_not_installed(
    adapted, plain_python, tmp_path
):
    exported = tmp_path / "minilm-seed-bert"
    assert export([str(adapted), "--output_dir", str(exported)]) == 0
    elsewhere = encoded_in_plain_environment(plain_python, "SentenceTransformer", exported, tmp_path)
    here = load_sentence_transformer(str(adapted)).encode(PROBE_TEXTS, convert_to_tensor=True)

    assert plain_bert_files(exported) == {
        "model_type": "bert", "architectures": ["BertModel"], "auto_map": False, "code_files": [],
        "tokenizer.json": True, "max_seq_length": 256,  # the start's
    }
    assert elsewhere["class"] == "BertModel"
    assert torch.allclose(torch.tensor(elsewhere["vectors"]), here, atol=1e-6, rtol=0)
    assert "the attention-masked mean of the encoder's last layer" in (exported / "README.md").read_text()
