"""The model card of a pretraining run, rendered from `model_cards/seed_encoder.md` with the run's own metadata."""

import json
import shlex
import sys
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

from ..common.model_cards import model_card_template, recipe_of_run
from .trainer import EVAL_TERMS, LOSS_TERMS

TEMPLATE = "seed_encoder.md"
LOSS_PLOT = "loss_curves.png"


def loss_curves_plot(output_dir: str | Path) -> Path:
    """Where a pre-training run's folder keeps the plot of its loss curves (its card shows it)."""
    return Path(output_dir) / LOSS_PLOT
TERM_COLORS = {"mlm_loss": "tab:blue", "decoder_loss": "tab:orange", "anchor_loss": "tab:red", "cls_information": "tab:green"}


def plot_loss_curves(log_history: list[dict], path: Path) -> None:
    """PNG of the MLM and decoder losses against the step, training and (when logged) evaluation, with the
    decoder's [CLS] information on the validation split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for prefix, style in (("", "-"), ("eval_", "o--")):
        for term in EVAL_TERMS if prefix else LOSS_TERMS:
            points = [(entry["step"], entry[prefix + term]) for entry in log_history if prefix + term in entry]
            if points:
                steps, values = zip(*points)
                label = f"{'eval ' if prefix else 'train '}{term.replace('_', ' ')}"
                axes.plot(steps, values, style, color=TERM_COLORS[term], label=label, alpha=1.0 if not prefix else 0.7)
    axes.set_xlabel("step")
    anchored = any("anchor_loss" in entry for entry in log_history)
    axes.set_ylabel("loss (nats per token; anchor: 1 − cosine)" if anchored else "loss (nats per token)")
    axes.set_title("SEED-Encoder pretraining")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _last(log_history: list[dict], key: str):
    values = [entry[key] for entry in log_history if key in entry]
    return round(values[-1], 4) if values else "n/a"


def render_model_card(
    *,
    config,
    log_history: list[dict],
    train_metrics: dict,
    training_args,
    data_description: str,
    max_seq_length: int,
    train_samples: int | None,
    warm_start: str | None,
    tokenizer_origin: str | None = None,
    continued_from: str | None = None,
    frozen_encoder: bool = False,
    anchor_loss_weight: float = 0.0,
    base_model: str | None,
    repo_id: str,
    command: list[str] | None = None,
) -> ModelCard:
    card_data = ModelCardData(
        library_name="transformers",
        license="apache-2.0",
        pipeline_tag="feature-extraction",
        tags=["seed-encoder", "bert", "dense-retrieval", "sentence-similarity", "pretraining"],
        base_model=base_model,
    )
    loss_rows = [
        {"name": "train (last log)", **{key: _last(log_history, key) for key in ("loss", *EVAL_TERMS)}},
    ]
    if any("eval_loss" in entry for entry in log_history):
        loss_rows.append(
            {"name": "validation", **{key: _last(log_history, f"eval_{key}") for key in ("loss", *EVAL_TERMS)}}
        )
    precision = "bf16 autocast" if training_args.bf16 else ("fp16" if training_args.fp16 else None)
    return ModelCard.from_template(
        card_data,
        template_str=model_card_template(TEMPLATE),
        model_name=repo_id,
        repo_id=repo_id,
        warm_start=warm_start,
        continued_from=continued_from,
        frozen_encoder=frozen_encoder,
        anchor_loss_weight=anchor_loss_weight,
        config=config,
        config_json=json.dumps(config.to_diff_dict(), indent=2, sort_keys=True),
        data_description=data_description,
        global_step=train_metrics.get("global_step", 0),
        epochs=train_metrics.get("epoch", 0.0),
        train_samples=train_samples,
        tokenizer_origin=tokenizer_origin,
        max_seq_length=max_seq_length,
        total_batch_size=training_args.per_device_train_batch_size
        * training_args.gradient_accumulation_steps
        * training_args.world_size,
        world_size=training_args.world_size,
        learning_rate=training_args.learning_rate,
        batching="grouped by length" if training_args.train_sampling_strategy == "group_by_length" else None,
        lr_scheduler_type=str(getattr(training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type)),
        seed=training_args.seed,
        precision=precision,
        train_runtime=train_metrics.get("train_runtime"),
        loss_rows=loss_rows,
        command=shlex.join(command if command is not None else sys.argv),
        recipe_file=recipe_of_run(training_args.config),
    )
