"""The standard `Trainer`, logging SEED's two loss terms beside the total."""

from transformers import Trainer

LOSS_TERMS = ("mlm_loss", "decoder_loss")


class SeedPretrainingTrainer(Trainer):
    """`Trainer` that also logs `mlm_loss` and `decoder_loss` (and `eval_mlm_loss`, `eval_decoder_loss`),
    averaged over the steps since the last log and over processes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._term_sums = {"train": {}, "eval": {}}
        self._term_counts = {"train": 0, "eval": 0}

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        phase = "train" if model.training else "eval"
        sums = self._term_sums[phase]
        for term in LOSS_TERMS:
            value = outputs.get(term)
            if value is not None:
                sums[term] = sums.get(term, 0.0) + value.detach().float()
        self._term_counts[phase] += 1
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        if "loss" in logs:
            logs.update(self._mean_terms("train", prefix=""))
        if "eval_loss" in logs:
            logs.update(self._mean_terms("eval", prefix="eval_"))
        super().log(logs, *args, **kwargs)

    def _mean_terms(self, phase: str, prefix: str) -> dict[str, float]:
        sums, count = self._term_sums[phase], self._term_counts[phase]
        means = {}
        for term in LOSS_TERMS:
            if term in sums and count:
                # Every process logs at the same step, so this collective call is matched on all ranks.
                mean = self.accelerator.reduce(sums[term] / count, reduction="mean")
                means[f"{prefix}{term}"] = round(float(mean), 4)
        self._term_sums[phase], self._term_counts[phase] = {}, 0
        return means
