"""`cls_information`: how many nats per token the weak decoder takes from the sequence's own [CLS] vector.

It is the decoder's loss with another sequence's [CLS] minus its loss with the right one: zero
when no [CLS] information can reach the decoder, large once SEED training has taught the encoder
to put the sequence into [CLS] and the decoder to read it there.
"""

import random

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from conftest import TINY
from modeling_seed import DataCollatorForSeedPretraining, SeedEncoderConfig, SeedEncoderForPreTraining
from training.pretraining.cls_information import cls_information

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS, SEQUENCES, STEPS = 16, 32, 200


def tiny_config(**overrides) -> SeedEncoderConfig:
    return SeedEncoderConfig(**{**TINY, **overrides})


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocabulary = {token: index for index, token in enumerate(SPECIAL_TOKENS + words)}
    backend = Tokenizer(models.WordLevel(vocabulary, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocabulary["[CLS]"]), ("[SEP]", vocabulary["[SEP]"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]",
    )


@pytest.fixture(scope="module")
def repeated_text_batch(pretrain_lines):
    """32 orderings of the same 16 words of a real sentence, masked as in pretraining.

    Every word follows every other in some sequence, so a decoder that sees the previous token
    cannot tell what comes next; only the sequence's own [CLS] can.
    """
    sentence = next(line for line in pretrain_lines(200) if len(set(line.split())) >= WORDS)
    words = list(dict.fromkeys(sentence.split()))[:WORDS]
    rng = random.Random(0)
    sequences = [" ".join(rng.sample(words, len(words))) for _ in range(SEQUENCES)]
    tokenizer = word_tokenizer(words)
    collator = DataCollatorForSeedPretraining(tokenizer=tokenizer, seed=0)
    return collator([{"input_ids": ids} for ids in tokenizer(sequences)["input_ids"]])


@pytest.fixture(scope="module")
def seed_trained(repeated_text_batch):
    """A tiny SEED model (span-2 decoder) after 200 steps on the batch."""
    torch.manual_seed(0)
    model = SeedEncoderForPreTraining(tiny_config(vocab_size=len(SPECIAL_TOKENS) + WORDS, decoder_attention_span=2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(STEPS):
        model(**repeated_text_batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model


def test_cls_information_is_clearly_positive_after_seed_training_on_repeated_text(seed_trained, repeated_text_batch):
    measured = cls_information(seed_trained, repeated_text_batch)

    # Without the right [CLS] the next word is one of ~15 (about 2.7 nats); with it, nearly certain.
    assert measured["cls_information"] > 1.0
    assert 0.5 < measured["cls_information_share"] <= 1.0


def test_cls_information_is_zero_when_the_decoder_cannot_read_cls(seed_trained, repeated_text_batch):
    model = SeedEncoderForPreTraining(seed_trained.config)
    model.load_state_dict(seed_trained.state_dict())
    with torch.no_grad():
        for layer in model.weak_decoder.layer:  # the [CLS] message every position adds: zeroed
            layer.cls_attention.dense.weight.zero_()
            layer.cls_attention.dense.bias.zero_()

    measured = cls_information(model, repeated_text_batch)

    assert measured["cls_information"] == pytest.approx(0.0, abs=1e-5)


def test_cls_information_needs_two_sequences_and_a_decoder(seed_trained, repeated_text_batch):
    one_sequence = {name: tensor[:1] for name, tensor in repeated_text_batch.items()}
    with pytest.raises(ValueError, match="at least two sequences"):
        cls_information(seed_trained, one_sequence)
    with pytest.raises(ValueError, match="weak decoder"):
        cls_information(SeedEncoderForPreTraining(tiny_config(vocab_size=len(SPECIAL_TOKENS) + WORDS, decoder_loss_weight=0)), repeated_text_batch)
