"""`mlm_loss_weight`: loss = mlm_loss_weight * MLM + lambda * reconstruction. At 0 the decoder alone trains the
encoder (the closest analogue of TSDAE): no MLM loss is computed and the MLM head is left as it was."""

import pytest
import torch
from huggingface_hub.errors import StrictDataclassClassValidationError

from modeling_seed import SeedEncoderConfig, SeedEncoderForPreTraining
from pretrain_helpers import TINY_RUN, pretrain, weights
from test_decoder_condition import padded_batch


@pytest.mark.parametrize("condition", ["cls", "mean"])  # cls takes the last layer's fast path, mean the full one
def test_decoder_only_loss_is_lambda_times_the_reconstruction_loss_of_the_full_model(tiny_config, condition):
    full = SeedEncoderForPreTraining(tiny_config(decoder_condition=condition, decoder_loss_weight=0.5)).eval()
    decoder_only = SeedEncoderForPreTraining(
        tiny_config(decoder_condition=condition, decoder_loss_weight=0.5, mlm_loss_weight=0)
    ).eval()
    decoder_only.load_state_dict(full.state_dict())
    batch = padded_batch(full.config.vocab_size)
    with torch.no_grad():
        expected = full(**batch)
        output = decoder_only(**batch)

    assert output.mlm_loss is None
    assert torch.allclose(output.decoder_loss, expected.decoder_loss, atol=1e-6)
    assert torch.allclose(output.loss, 0.5 * expected.decoder_loss, atol=1e-6)


def test_mlm_loss_weight_scales_the_mlm_term(tiny_config):
    full = SeedEncoderForPreTraining(tiny_config()).eval()
    weighted = SeedEncoderForPreTraining(tiny_config(mlm_loss_weight=0.25)).eval()
    weighted.load_state_dict(full.state_dict())
    batch = padded_batch(full.config.vocab_size)
    with torch.no_grad():
        expected, output = full(**batch), weighted(**batch)

    assert torch.allclose(output.loss, 0.25 * expected.mlm_loss + expected.decoder_loss, atol=1e-6)


@pytest.mark.parametrize("condition", ["cls", "mean"])
def test_decoder_only_gradients_reach_the_encoder_and_never_the_mlm_head(tiny_config, condition):
    model = SeedEncoderForPreTraining(tiny_config(decoder_condition=condition, mlm_loss_weight=0))
    model(**padded_batch(model.config.vocab_size)).loss.backward()

    head = dict(model.cls.predictions.transform.named_parameters())
    assert all(parameter.grad is None for parameter in head.values()), "the MLM head's transform got a gradient"
    assert model.cls.predictions.bias.grad is None
    assert model.bert.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0


def test_a_model_with_neither_loss_is_refused(tiny_config):
    with pytest.raises(StrictDataclassClassValidationError, match="both 0, so no loss would train the model"):
        tiny_config(mlm_loss_weight=0, decoder_loss_weight=0)
    with pytest.raises(StrictDataclassClassValidationError, match="`mlm_loss_weight` must be >= 0"):
        tiny_config(mlm_loss_weight=-1)


def test_pretrain_flag_trains_the_encoder_leaves_the_mlm_head_and_the_card_says_so(scifact_slice, tmp_path):
    common = [
        "--train_file", scifact_slice / "corpus.jsonl", *TINY_RUN, "--tokenizer_vocab_size", "1000",
        "--save_strategy", "no", "--seed", "3",
    ]
    assert pretrain([*common, "--output_dir", tmp_path / "start", "--max_steps", "1"]) == 0
    out = tmp_path / "decoder-only"
    assert pretrain([
        *common, "--model_name_or_path", tmp_path / "start", "--output_dir", out, "--max_steps", "2",
        "--mlm_loss_weight", "0",
    ]) == 0
    start, trained = weights(tmp_path / "start"), weights(out)

    assert SeedEncoderConfig.from_pretrained(out).mlm_loss_weight == 0
    head = [name for name in start if name.startswith("cls.predictions.transform") or name == "cls.predictions.bias"]
    assert head and all(torch.equal(start[name], trained[name]) for name in head)
    encoder_query = "bert.encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(start[encoder_query], trained[encoder_query])
    assert "reconstruction alone (`mlm_loss_weight: 0`" in (out / "README.md").read_text()
