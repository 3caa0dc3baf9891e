"""`decoder_condition`: the one vector the weak decoder reads. "cls" (the paper's) is the last layer's [CLS] state;
"mean" is the attention-masked mean of the last layer, the vector a mean-pooling Siamese model such as
all-MiniLM-L6-v2 retrieves with, so that pretraining shapes the vector the model retrieves with."""

import pytest
import torch
from huggingface_hub.errors import StrictDataclassClassValidationError
from sentence_transformers.sentence_transformer.modules import Pooling

from modeling_seed import SeedEncoderConfig, SeedEncoderForPreTraining
from pretrain_helpers import TINY_RUN, pretrain
from training.pretraining.cls_information import cls_information, cls_information_from_vectors


def padded_batch(vocab_size: int) -> dict:
    """Three sequences, two of them padded (0) at the end, with three masked positions and their labels."""
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(5, vocab_size, (3, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 7:] = 0
    attention_mask[2, 4:] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, 0)
    labels = torch.full_like(input_ids, -100)
    for row, position in ((0, 3), (1, 5), (2, 2)):
        labels[row, position] = input_ids[row, position]
        input_ids[row, position] = 4  # the mask token
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def decoder_inputs(model, batch) -> torch.Tensor:
    """The vectors the weak decoder was called with in `model(**batch)`."""
    seen = []
    handle = model.weak_decoder.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach()))
    with torch.no_grad():
        model(**batch)
    handle.remove()
    [vectors] = seen
    return vectors


def last_layer(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state


def test_mean_condition_gives_the_decoder_the_mean_over_real_tokens_only(tiny_config):
    model = SeedEncoderForPreTraining(tiny_config(decoder_condition="mean")).eval()
    batch = padded_batch(model.config.vocab_size)
    states, mask = last_layer(model, batch), batch["attention_mask"]
    expected = torch.stack([states[row, : int(mask[row].sum())].mean(dim=0) for row in range(3)])

    assert torch.allclose(decoder_inputs(model, batch), expected, atol=1e-6)
    assert not torch.allclose(expected, states.mean(dim=1), atol=1e-3)  # the padding would change it


def test_mean_condition_is_sentence_transformers_mean_pooling_of_the_same_states(tiny_config):
    model = SeedEncoderForPreTraining(tiny_config(decoder_condition="mean")).eval()
    batch = padded_batch(model.config.vocab_size)
    pooling = Pooling(model.config.hidden_size, "mean")
    pooled = pooling({"token_embeddings": last_layer(model, batch), "attention_mask": batch["attention_mask"]})

    assert torch.allclose(decoder_inputs(model, batch), pooled["sentence_embedding"], atol=1e-6)


def test_cls_condition_gives_the_decoder_the_cls_state_by_default(tiny_config):
    model = SeedEncoderForPreTraining(tiny_config()).eval()
    batch = padded_batch(model.config.vocab_size)

    assert model.config.decoder_condition == "cls"
    assert torch.allclose(decoder_inputs(model, batch), last_layer(model, batch)[:, 0], atol=1e-6)


def test_mean_condition_losses_are_those_of_the_decoder_on_the_mean(tiny_config):
    model = SeedEncoderForPreTraining(tiny_config(decoder_condition="mean")).eval()
    batch = padded_batch(model.config.vocab_size)
    with torch.no_grad():
        output = model(**batch)
        unmasked = torch.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])
        expected = model.weak_decoder(output.pooler_output, unmasked, batch["attention_mask"]).loss

    assert torch.allclose(output.decoder_loss, expected)
    assert torch.allclose(output.loss, output.mlm_loss + expected)


def test_cls_information_reads_the_vector_of_the_models_condition(tiny_config):
    model = SeedEncoderForPreTraining(tiny_config(decoder_condition="mean")).eval()
    batch = padded_batch(model.config.vocab_size)
    unmasked = torch.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])
    mean = decoder_inputs(model, batch)
    with torch.no_grad():
        expected, swapped = cls_information_from_vectors(model.weak_decoder, mean, unmasked, batch["attention_mask"])

    measured = cls_information(model, batch)
    assert measured["cls_information"] == pytest.approx(float(expected), abs=1e-6)
    assert measured["cls_information_share"] == pytest.approx(float(expected / swapped), abs=1e-6)


def test_an_unknown_condition_is_refused_naming_the_choices(tiny_config):
    with pytest.raises(StrictDataclassClassValidationError, match="`decoder_condition` must be one of 'cls', 'mean'"):
        tiny_config(decoder_condition="max")


def test_the_condition_is_saved_and_loaded_with_the_model(tiny_config, tmp_path):
    SeedEncoderForPreTraining(tiny_config(decoder_condition="mean")).save_pretrained(tmp_path)

    assert SeedEncoderConfig.from_pretrained(tmp_path).decoder_condition == "mean"


def test_pretrain_flag_sets_the_condition_and_the_card_states_it(scifact_slice, tmp_path):
    out = tmp_path / "seed-mean"
    assert pretrain([
        "--train_file", scifact_slice / "corpus.jsonl", "--output_dir", out, *TINY_RUN, "--tokenizer_vocab_size", "1000",
        "--max_steps", "2", "--save_strategy", "no", "--decoder_condition", "mean",
    ]) == 0
    card = (out / "README.md").read_text()

    assert SeedEncoderConfig.from_pretrained(out).decoder_condition == "mean"
    assert "the attention-masked mean of the encoder's last layer (`decoder_condition: mean`" in card
    assert "[CLS] vector (`decoder_condition: cls`)" not in card
