"""Batches for SEED pretraining: BERT masking for the encoder, the unmasked ids for the decoder."""

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DataCollatorForLanguageModeling

from .chunked_loss import IGNORE_INDEX


@dataclass
class DataCollatorForSeedPretraining(DataCollatorForLanguageModeling):
    """`DataCollatorForLanguageModeling` (15% masking, 80/10/10, special tokens and padding never
    masked, optional `whole_word_mask`) that also returns `unmasked_input_ids`, the input before
    masking, which the weak decoder reconstructs.

    With `seed` set, a batch's masks are a function of the seed and the batch's token ids alone,
    not of how many batches came before. A run resumed from a checkpoint therefore masks every
    later batch exactly as the uninterrupted run did, and masking draws nothing from the global
    RNG (which the Trainer restores for dropout).
    """

    def torch_mask_tokens(self, inputs: Any, special_tokens_mask: Any = None, offset_mapping: Any = None):
        if self.seed is not None:
            digest = hashlib.blake2b(inputs.numpy().tobytes(), digest_size=8, key=str(self.seed).encode()).digest()
            self.generator = torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))
        return super().torch_mask_tokens(inputs, special_tokens_mask=special_tokens_mask, offset_mapping=offset_mapping)

    def torch_call(self, examples: list[Any]) -> dict[str, Any]:
        if self.whole_word_mask and isinstance(examples[0], Mapping) and "offset_mapping" in examples[0]:
            examples = self._pad_offset_mappings(examples)
        batch = super().torch_call(examples)
        # Masking only rewrites positions that get a label, and the label is the original id there.
        batch["unmasked_input_ids"] = torch.where(batch["labels"] != IGNORE_INDEX, batch["labels"], batch["input_ids"])
        return batch

    def _pad_offset_mappings(self, examples: list[Mapping]) -> list[dict]:
        """Whole-word masking reads word boundaries from `offset_mapping`, which `tokenizer.pad` cannot pad;
        pad it here to the length the ids will get, with the (0, 0) offsets of special tokens."""
        length = max(len(example["input_ids"]) for example in examples)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        padded = []
        for example in examples:
            offsets = [tuple(pair) for pair in example["offset_mapping"]]
            filler = [(0, 0)] * (length - len(offsets))
            offsets = filler + offsets if self.tokenizer.padding_side == "left" else offsets + filler
            padded.append({**example, "offset_mapping": offsets})
        return padded


__all__ = ["DataCollatorForSeedPretraining"]
