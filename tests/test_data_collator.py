"""DataCollatorForSeedPretraining on real text with the real BERT tokenizer: BERT's masking for the encoder
and, for the decoder, the text exactly as tokenized."""

import pytest
import torch

from modeling_seed import DataCollatorForSeedPretraining

MAX_LENGTH = 64


@pytest.fixture(scope="module")
def examples(tokenizer, pretrain_lines):
    """400 real lines, tokenized the usual way (truncated, unpadded): about 15k tokens."""
    encoded = tokenizer(pretrain_lines(400), truncation=True, max_length=MAX_LENGTH)
    return [{key: encoded[key][index] for key in encoded} for index in range(len(encoded["input_ids"]))]


@pytest.fixture(scope="module")
def original_ids(tokenizer, examples):
    ids_only = [{"input_ids": example["input_ids"]} for example in examples]
    return tokenizer.pad(ids_only, return_tensors="pt")["input_ids"]


@pytest.fixture(scope="module")
def batch(tokenizer, examples):
    return DataCollatorForSeedPretraining(tokenizer, seed=0)(examples)


def special_positions(tokenizer, ids: torch.Tensor) -> torch.Tensor:
    return torch.isin(ids, torch.tensor([tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id]))


def test_unmasked_input_ids_are_exactly_the_tokenized_text(batch, original_ids):
    assert batch["unmasked_input_ids"].shape == batch["input_ids"].shape
    assert torch.equal(batch["unmasked_input_ids"], original_ids)
    assert not torch.equal(batch["input_ids"], original_ids)  # while the encoder's input is masked


def test_about_fifteen_percent_of_ordinary_tokens_are_masked(tokenizer, batch, original_ids):
    ordinary = ~special_positions(tokenizer, original_ids)
    masked = batch["labels"] != -100

    assert ordinary.sum() > 10_000
    assert 0.13 < masked[ordinary].float().mean().item() < 0.17


def test_cls_sep_and_padding_are_never_masked_nor_changed(tokenizer, batch, original_ids):
    special = special_positions(tokenizer, original_ids)

    assert (original_ids == tokenizer.pad_token_id).any()  # the batch really has padding
    assert (batch["labels"][special] == -100).all()
    assert torch.equal(batch["input_ids"][special], original_ids[special])


def test_labels_are_the_original_ids_at_masked_positions_and_inputs_unchanged_elsewhere(batch, original_ids):
    masked = batch["labels"] != -100

    assert torch.equal(batch["labels"][masked], original_ids[masked])
    assert torch.equal(batch["input_ids"][~masked], original_ids[~masked])


def test_masked_tokens_become_mask_80_percent_random_10_percent_unchanged_10_percent(tokenizer, batch, original_ids):
    masked = batch["labels"] != -100
    inputs, originals = batch["input_ids"][masked], original_ids[masked]

    became_mask = (inputs == tokenizer.mask_token_id).float().mean().item()
    unchanged = (inputs == originals).float().mean().item()
    random = ((inputs != tokenizer.mask_token_id) & (inputs != originals)).float().mean().item()

    assert masked.sum() > 1500
    assert 0.76 < became_mask < 0.84
    assert 0.07 < unchanged < 0.13
    assert 0.07 < random < 0.13


def test_whole_word_mask_masks_every_piece_of_a_word_together_with_dynamic_padding(tokenizer, pretrain_lines):
    # Word boundaries come from offset_mapping, which tokenizer.pad() cannot pad: the collator pads it.
    encoded = tokenizer(
        pretrain_lines(200), truncation=True, max_length=MAX_LENGTH,
        return_offsets_mapping=True, return_special_tokens_mask=True,
    )
    examples = [{key: encoded[key][index] for key in encoded} for index in range(len(encoded["input_ids"]))]
    with pytest.warns(UserWarning, match="Random token replacement is not supported with whole word masking"):
        collator = DataCollatorForSeedPretraining(tokenizer, whole_word_mask=True, seed=0)

    batch = collator(examples)
    original_ids = tokenizer.pad([{"input_ids": ids} for ids in encoded["input_ids"]], return_tensors="pt")["input_ids"]
    masked = batch["labels"] != -100
    is_continuation = torch.tensor(
        [[token.startswith("##") for token in tokenizer.convert_ids_to_tokens(row)] for row in original_ids.tolist()]
    )

    assert len({len(ids) for ids in encoded["input_ids"]}) > 1  # the examples really had different lengths
    assert (is_continuation & masked).sum() > 50  # many multi-piece words were masked...
    assert torch.equal(masked[:, 1:][is_continuation[:, 1:]], masked[:, :-1][is_continuation[:, 1:]])  # ...whole
    assert (batch["input_ids"][masked] == tokenizer.mask_token_id).all()
    assert torch.equal(batch["unmasked_input_ids"], original_ids)
    assert "offset_mapping" not in batch
