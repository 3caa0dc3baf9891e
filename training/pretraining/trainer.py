"""The standard `Trainer`, logging SEED's two loss terms beside the total, and in evaluation how much
the decoder reads from [CLS]."""

from transformers import Trainer

from .cls_information import cls_information_from_vectors

LOSS_TERMS = ("mlm_loss", "decoder_loss")
EVAL_TERMS = (*LOSS_TERMS, "cls_information")


class SeedPretrainingTrainer(Trainer):
    """`Trainer` that also logs `mlm_loss` and `decoder_loss` (and `eval_mlm_loss`, `eval_decoder_loss`,
    `eval_cls_information`), averaged over the batches since the last log and over processes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._term_sums = {"train": {}, "eval": {}}
        self._term_counts = {"train": {}, "eval": {}}

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        phase = "train" if model.training else "eval"
        terms = {term: outputs.get(term) for term in LOSS_TERMS}
        decoder = self.accelerator.unwrap_model(model).weak_decoder
        if phase == "eval" and decoder is not None and outputs.pooler_output.shape[0] > 1:
            terms["cls_information"], _ = cls_information_from_vectors(
                decoder, outputs.pooler_output, inputs["unmasked_input_ids"], inputs.get("attention_mask"),
                own_loss=outputs.decoder_loss,
            )
        for term, value in terms.items():
            if value is not None:
                self._term_sums[phase][term] = self._term_sums[phase].get(term, 0.0) + value.detach().float()
                self._term_counts[phase][term] = self._term_counts[phase].get(term, 0) + 1
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        if "loss" in logs:
            logs.update(self._mean_terms("train", prefix="", terms=LOSS_TERMS))
        if "eval_loss" in logs:
            logs.update(self._mean_terms("eval", prefix="eval_", terms=EVAL_TERMS))
        super().log(logs, *args, **kwargs)

    def _mean_terms(self, phase: str, prefix: str, terms: tuple[str, ...]) -> dict[str, float]:
        sums, counts = self._term_sums[phase], self._term_counts[phase]
        means = {}
        for term in terms:
            if term in sums:
                # Every process logs at the same step, so this collective call is matched on all ranks.
                mean = self.accelerator.reduce(sums[term] / counts[term], reduction="mean")
                means[f"{prefix}{term}"] = round(float(mean), 4)
        self._term_sums[phase], self._term_counts[phase] = {}, {}
        return means
