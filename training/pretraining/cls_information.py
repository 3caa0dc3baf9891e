"""How much of a sequence the weak decoder takes from its [CLS] vector (or, with `decoder_condition="mean"`, from the
masked mean of the last layer: whichever vector the decoder reads; "[CLS]" below stands for it).

The decoder rebuilds each sequence twice: from the sequence's own [CLS] vector, and from the [CLS]
vector of another sequence of the batch (the batch rolled by one). What the decoder can rebuild
without the right [CLS] it rebuilds from language patterns alone; the difference of the two
losses, in nats per token, is what [CLS] carries and the decoder reads. A strong decoder, which
predicts from the tokens it has seen, "bypasses" [CLS] and shows a small difference; the weak
decoder SEED trains with should show a large one.
"""

import torch

from modeling_seed.chunked_loss import IGNORE_INDEX


def cls_information_from_vectors(
    decoder, cls_vectors: torch.Tensor, unmasked_input_ids: torch.Tensor, attention_mask, own_loss=None
):
    """(cls_information, loss with another sequence's [CLS]) for one batch of [CLS] vectors, in nats per token.

    `own_loss`, the decoder's loss with the sequences' own [CLS], is computed when not given.
    Needs at least two sequences: a batch of one has no other [CLS] to swap in.
    """
    if cls_vectors.shape[0] < 2:
        raise ValueError("cls_information needs a batch of at least two sequences (one's [CLS] replaces another's).")
    if own_loss is None:
        own_loss = decoder(cls_vectors, unmasked_input_ids, attention_mask).loss
    swapped_loss = decoder(cls_vectors.roll(1, dims=0), unmasked_input_ids, attention_mask).loss
    return swapped_loss - own_loss, swapped_loss


@torch.no_grad()
def cls_information(model, batch: dict) -> dict[str, float]:
    """`cls_information` (nats per token) of a `SeedEncoderForPreTraining` on a collated batch, and its share of
    the decoder loss without the right [CLS] (0: [CLS] unused; 1: the decoder rebuilds the text from [CLS] alone).

    The encoder reads the batch as in training (`input_ids`, masked when the collator masked them); the
    decoder rebuilds `unmasked_input_ids` (or `input_ids` when there is none). Dropout is off.
    """
    if model.weak_decoder is None:
        raise ValueError("cls_information needs a model with a weak decoder (decoder_loss_weight > 0).")
    was_training = model.training
    model.eval()
    try:
        attention_mask = batch.get("attention_mask")
        unmasked = batch.get("unmasked_input_ids")
        if unmasked is None:
            labels = batch.get("labels")
            unmasked = batch["input_ids"] if labels is None else torch.where(labels != IGNORE_INDEX, labels, batch["input_ids"])
        last_hidden_state = model.bert(input_ids=batch["input_ids"], attention_mask=attention_mask).last_hidden_state
        cls_vectors = model.decoder_context(last_hidden_state, attention_mask)  # [CLS] or the masked mean
        information, swapped_loss = cls_information_from_vectors(model.weak_decoder, cls_vectors, unmasked, attention_mask)
    finally:
        model.train(was_training)
    return {"cls_information": float(information), "cls_information_share": float(information / swapped_loss)}
