"""Training a Trainer, or resuming it from a checkpoint, where a checkpoint of the run's last step means the run is
trained: its weights and state are restored rather than trained on. (transformers 5, resumed there with --max_steps,
skips the epoch's trained batches and trains one step more before it checks the step count; with --num_train_epochs
it trains none.)"""

import logging
from pathlib import Path

from transformers import Trainer, TrainerState
from transformers.trainer import TRAINER_STATE_NAME

logger = logging.getLogger(__name__)


def train_or_restore(trainer: Trainer, checkpoint: str | Path | None) -> dict:
    """`trainer.train(resume_from_checkpoint=checkpoint)` and its metrics; or, where `checkpoint` is at --max_steps,
    the trained run from it without training (no metrics: no training time or loss of this run's own). Its state and
    weights are restored, the best checkpoint's weights with --load_best_model_at_end, as `train()` would end. Not
    under DeepSpeed and FSDP, whose Trainer loads weights into the wrapped model only inside `train()`: there it trains
    on."""
    loads_outside_train = not (trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled)
    if checkpoint is not None and trainer.args.max_steps > 0 and loads_outside_train:
        state = TrainerState.load_from_json(str(Path(checkpoint) / TRAINER_STATE_NAME))
        if state.global_step >= trainer.args.max_steps:
            logger.warning("%s holds the run's last step: nothing to train, its weights are the model.", checkpoint)
            trainer.state = state
            trainer._load_from_checkpoint(str(checkpoint))
            if trainer.args.load_best_model_at_end and state.best_model_checkpoint:
                trainer._load_best_model()
            return {}
    return dict(trainer.train(resume_from_checkpoint=None if checkpoint is None else str(checkpoint)).metrics)
