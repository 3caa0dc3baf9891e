"""End to end: transformers' Trainer pre-trains a tiny SEED-Encoder on real text with the SEED collator,
and both objectives, MLM and reconstruction from [CLS], improve on held-out text."""

import torch
import pytest
from transformers import Trainer, TrainingArguments

from modeling_seed import DataCollatorForSeedPretraining, SeedEncoderForPreTraining

MAX_LENGTH = 64


def held_out_losses(model, batch) -> tuple[float, float]:
    model.eval()
    with torch.no_grad():
        output = model(**batch)
    model.train()
    return output.mlm_loss.item(), output.decoder_loss.item()


@pytest.mark.slow
def test_trainer_lowers_both_mlm_and_reconstruction_loss_on_held_out_text(
    tiny_config, tokenizer, pretrain_lines, tmp_path
):
    lines = pretrain_lines(1064)
    encoded = tokenizer(lines, truncation=True, max_length=MAX_LENGTH)
    examples = [{key: encoded[key][index] for key in encoded} for index in range(len(lines))]
    train, held_out = examples[:1000], examples[1000:]
    collator = DataCollatorForSeedPretraining(tokenizer, seed=0)
    held_out_batch = collator(held_out)  # masked once: before and after see the same masks

    model = SeedEncoderForPreTraining(
        tiny_config(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, max_position_embeddings=MAX_LENGTH,
            decoder_num_layers=3,  # the paper's decoder: 3 layers, span 2
        )
    )
    mlm_before, decoder_before = held_out_losses(model, held_out_batch)
    trainer = Trainer(
        model=model,
        args=TrainingArguments(
            output_dir=str(tmp_path),
            use_cpu=True,
            max_steps=40,
            per_device_train_batch_size=16,
            learning_rate=3e-3,
            warmup_steps=4,
            logging_steps=5,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            seed=0,
        ),
        train_dataset=train,
        data_collator=collator,
    )
    trainer.train()
    mlm_after, decoder_after = held_out_losses(model, held_out_batch)

    # Both start near ln(30522) = 10.3 nats; 40 steps learn at least the word frequencies.
    assert mlm_after < mlm_before - 2.0, (mlm_before, mlm_after)
    assert decoder_after < decoder_before - 2.0, (decoder_before, decoder_after)
    logged = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 8 and logged[-1] < logged[0] - 2.0
