"""Trainer argument values that transformers accepts and the run would reject only later: a negative learning rate
reaches the optimizer after the start has been evaluated and its examples written, and a zero batch size the data
loader. Both pipelines check them as the arguments are parsed, before any work."""

from .errors import InputError

# flag -> (what it must be, the test)
RULES = {
    "learning_rate": ("above 0", lambda value: value > 0),
    "per_device_train_batch_size": ("at least 1", lambda value: value >= 1),
    "per_device_eval_batch_size": ("at least 1", lambda value: value >= 1),
    "gradient_accumulation_steps": ("at least 1", lambda value: value >= 1),
    "num_train_epochs": ("0 or more", lambda value: value >= 0),
    "weight_decay": ("0 or more", lambda value: value >= 0),
    "adam_beta1": ("in [0, 1)", lambda value: 0 <= value < 1),
    "adam_beta2": ("in [0, 1)", lambda value: 0 <= value < 1),
    "adam_epsilon": ("0 or more", lambda value: value >= 0),
    "max_grad_norm": ("0 or more (0 turns clipping off)", lambda value: value >= 0),
    "logging_steps": ("above 0", lambda value: value > 0),
    "save_steps": ("above 0", lambda value: value > 0),
    "eval_steps": ("above 0", lambda value: value > 0),
}


def check_trainer_values(arguments, rules: dict = RULES) -> None:
    """Refuse (InputError) the first of `arguments`' values that breaks its rule; None means "the default" and is
    left to the pipeline."""
    for name, (requirement, holds) in rules.items():
        value = getattr(arguments, name, None)
        if value is not None and not holds(value):
            raise InputError(f"--{name} {value}: must be {requirement}.")
