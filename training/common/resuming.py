"""Resuming a Trainer from a checkpoint of the run's last step: the run is trained, so its weights and state are
restored rather than trained on. (transformers 5, resumed there with --max_steps, skips the epoch's trained batches
and trains one step more before it checks the step count; with --num_train_epochs it trains none.)"""

import logging
from pathlib import Path

from transformers import Trainer, TrainerState
from transformers.trainer import TRAINER_STATE_NAME

logger = logging.getLogger(__name__)


def holds_the_last_step(checkpoint: str | Path, trainer: Trainer) -> bool:
    """Whether `checkpoint` is at the trainer's --max_steps, where only its own loading can restore it: under
    DeepSpeed and FSDP the Trainer loads weights into the wrapped model inside `train()`, so there it trains on."""
    if trainer.args.max_steps <= 0 or trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        return False
    state = TrainerState.load_from_json(str(Path(checkpoint) / TRAINER_STATE_NAME))
    return state.global_step >= trainer.args.max_steps


def restore_the_last_step(trainer: Trainer, checkpoint: str | Path) -> None:
    """The trained run from the checkpoint of its last step: its state and weights (the best checkpoint's, with
    --load_best_model_at_end, as `train()` would end), without training."""
    logger.warning("%s holds the run's last step: nothing left to train, its weights are the trained model.", checkpoint)
    trainer.state = TrainerState.load_from_json(str(Path(checkpoint) / TRAINER_STATE_NAME))
    trainer._load_from_checkpoint(str(checkpoint))
    if trainer.args.load_best_model_at_end and trainer.state.best_model_checkpoint:
        trainer._load_best_model()
