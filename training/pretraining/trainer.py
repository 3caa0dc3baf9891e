"""The standard `Trainer`, logging SEED's loss terms beside the total, and in evaluation how much
the decoder reads from [CLS]; the weak decoder may train at its own learning rate, and the vector it reads may be held
near the start's. Also what a run's saved Trainer files say about resuming it: whether it already finished, and
whether it froze the encoder."""

import copy
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import Trainer
from transformers.trainer import TRAINER_STATE_NAME, TRAINING_ARGS_NAME

from ..common.errors import InputError
from .cls_information import cls_information_from_vectors

LOSS_TERMS = ("mlm_loss", "decoder_loss", "anchor_loss")
EVAL_TERMS = (*LOSS_TERMS, "cls_information")


def decoder_own_parameters(model) -> set[int]:
    """The ids of the weak decoder's own weights: by identity, not by name, since wrappers (DDP, FSDP,
    torch.compile) prefix the names; the word embeddings it shares with the encoder are the encoder's."""
    encoder = {id(parameter) for parameter in model.bert.parameters()}
    return {id(parameter) for parameter in model.weak_decoder.parameters()} - encoder


def saved_arguments(folder: Path):
    """The training arguments a Trainer pickled into `folder` (this run's own file, not a download), or None."""
    path = Path(folder) / TRAINING_ARGS_NAME
    return torch.load(path, weights_only=False) if path.is_file() else None


def finished_at(folder: Path, training_args) -> int | None:
    """The step at which the run whose final model `folder` holds finished, where it trained to its last step and this
    command asks for the same length (--max_steps, --num_train_epochs); None where there is more to train. (The
    Trainer, resumed from a checkpoint of the last step, would train one step more.)"""
    state_file, saved = Path(folder) / TRAINER_STATE_NAME, saved_arguments(folder)
    if saved is None or not state_file.is_file():
        return None
    state = json.loads(state_file.read_text())
    same_length = (saved.max_steps, saved.num_train_epochs) == (training_args.max_steps, training_args.num_train_epochs)
    return state["global_step"] if same_length and state["global_step"] >= state["max_steps"] else None


def check_same_frozen_encoder(checkpoint: str, freeze_encoder: bool) -> None:
    """Refuse to resume a checkpoint of a run that froze the encoder when this run does not, or the reverse: the
    optimizer's saved state is for other weights, and PyTorch would only fail deep inside the Trainer."""
    saved = saved_arguments(checkpoint)
    if saved is None:
        return
    frozen = bool(getattr(saved, "freeze_encoder", False))
    if frozen != freeze_encoder:
        raise InputError(
            f"Cannot resume {checkpoint}: it was trained {'with' if frozen else 'without'} --freeze_encoder and this "
            f"run is {'without' if frozen else 'with'} it, so its optimizer state does not fit. To train everything "
            "after a frozen run, start a new --output_dir from the frozen run's folder (--model_name_or_path); to "
            "finish that run, repeat its flags; --overwrite_output_dir starts over."
        )


class SeedPretrainingTrainer(Trainer):
    """`Trainer` that also logs `mlm_loss` and `decoder_loss` (and `eval_mlm_loss`, `eval_decoder_loss`,
    `eval_cls_information`), averaged over the batches since the last log and over processes, and trains the weak
    decoder's own weights at `args.decoder_learning_rate` when it is set. With `args.anchor_loss_weight` w > 0 the loss
    gains w * `anchor_loss`: the mean of 1 - cosine between the vector the decoder reads and the vector a frozen copy
    of the starting encoder gives the same input (logged as `anchor_loss`, `eval_anchor_loss`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._term_sums = {"train": {}, "eval": {}}
        self._term_counts = {"train": {}, "eval": {}}
        self.anchor_encoder = None
        if self.args.anchor_loss_weight > 0:
            # Copied before training, so before a resumed run loads its checkpoint: the anchor is always the start.
            self.anchor_encoder = copy.deepcopy(self.model.bert).requires_grad_(False).eval().to(self.args.device)

    def create_optimizer(self, model=None):
        """The Trainer's optimizer, with the weak decoder's own weights in parameter groups of their own at
        `args.decoder_learning_rate` (weight decay grouped as the Trainer groups it). The learning-rate schedule
        scales every group alike, and the encoder's groups come first, so the logged `learning_rate` is the encoder's."""
        model = self.model if model is None else model
        unwrapped = self.accelerator.unwrap_model(model)
        decoder_rate = self.args.decoder_learning_rate
        if self.optimizer is not None or decoder_rate in (None, self.args.learning_rate) or unwrapped.weak_decoder is None:
            return super().create_optimizer(model)
        decay = set(self.get_decay_parameter_names(model))
        decoder_own = decoder_own_parameters(unwrapped)
        trained = [(name, parameter) for name, parameter in model.named_parameters() if parameter.requires_grad]
        if not any(id(parameter) in decoder_own for _, parameter in trained):
            raise ValueError(
                "--decoder_learning_rate: none of the parameters the optimizer would train is the weak decoder's own, "
                "so they cannot be given a rate of their own. A wrapper that flattens parameters (FSDP with "
                "use_orig_params false) hides them: set fsdp_use_orig_params true, or leave --decoder_learning_rate "
                "unset to train everything at --learning_rate."
            )
        groups = []
        for in_decoder, learning_rate in ((False, self.args.learning_rate), (True, decoder_rate)):
            for decays in (True, False):
                parameters = [
                    parameter for name, parameter in trained
                    if (id(parameter) in decoder_own) == in_decoder and (name in decay) == decays
                ]
                groups.append({
                    "params": parameters, "lr": learning_rate,
                    "weight_decay": self.args.weight_decay if decays else 0.0,
                })
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, model)
        self.optimizer = optimizer_cls(groups, **optimizer_kwargs)
        return self.optimizer

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        phase = "train" if model.training else "eval"
        terms = {term: outputs.get(term) for term in LOSS_TERMS}
        unwrapped = self.accelerator.unwrap_model(model)
        if self.anchor_encoder is not None:
            terms["anchor_loss"] = self.anchor_loss(unwrapped, inputs, outputs.pooler_output)
            loss = loss + self.args.anchor_loss_weight * terms["anchor_loss"]
        decoder = unwrapped.weak_decoder
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

    def anchor_loss(self, unwrapped_model, inputs: dict, vectors: torch.Tensor) -> torch.Tensor:
        """Mean of 1 - cosine between `vectors` (what the decoder read) and the frozen start's vectors of the same
        (masked) input, pooled as the decoder's are (`decoder_condition`)."""
        attention_mask = inputs.get("attention_mask")
        with torch.no_grad():
            states = self.anchor_encoder(
                input_ids=inputs["input_ids"], attention_mask=attention_mask, token_type_ids=inputs.get("token_type_ids")
            ).last_hidden_state
            start_vectors = unwrapped_model.decoder_context(states, attention_mask)
        return (1 - F.cosine_similarity(vectors.float(), start_vectors.float(), dim=-1)).mean()

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
