"""Batches for SEED pretraining: BERT masking for the encoder, the unmasked ids for the decoder."""

from dataclasses import dataclass
from typing import Any

import torch
from transformers import DataCollatorForLanguageModeling

from .linear_cross_entropy import IGNORE_INDEX


@dataclass
class DataCollatorForSeedPretraining(DataCollatorForLanguageModeling):
    """`DataCollatorForLanguageModeling` (15% masking, 80/10/10, special tokens and padding never
    masked, optional `whole_word_mask`) that also returns `unmasked_input_ids`, the input before
    masking, which the weak decoder reconstructs.
    """

    def torch_call(self, examples: list[Any]) -> dict[str, Any]:
        batch = super().torch_call(examples)
        # Masking only rewrites positions that get a label, and the label is the original id there.
        batch["unmasked_input_ids"] = torch.where(batch["labels"] != IGNORE_INDEX, batch["labels"], batch["input_ids"])
        return batch


__all__ = ["DataCollatorForSeedPretraining"]
