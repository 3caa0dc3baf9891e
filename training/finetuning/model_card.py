"""The fine-tuned model's card: sentence-transformers' own card, filled with what the run knows and
extended with the recipe, the starting checkpoint, a dev/test table and a plot of the training loss
and dev nDCG@10."""

import json
import shlex
import sys
from pathlib import Path

from huggingface_hub import metadata_load
from jinja2 import Template
from sentence_transformers.sparse_encoder.losses import CachedSpladeLoss, SpladeLoss

from ..common.model_cards import model_card_template, recipe_of_run
from ..data.collection import Collection
from ..evaluation.retrievers.faiss_index import IVF
from .arguments import OWN_SCALE, SIMILARITY_SCALE
from .training_set import TrainingSet
from .rounds import RoundPlan

TEMPLATE = "finetuned_retriever.md"
CURVES_PLOT = "training_curves.png"
PRIMARY_METRIC = "ndcg@10"
# Widget examples: dev queries, each with its judged document and the judged documents of two other queries.
WIDGET_EXAMPLES = 3
DOCUMENTS_PER_EXAMPLE = 3


def starting_licence(path: str) -> str | None:
    """The licence the starting checkpoint's model card declares, if it has a card that declares one."""
    card = Path(path) / "README.md"
    metadata = metadata_load(card) if card.is_file() else None
    return (metadata or {}).get("license")


def dev_examples(dev: Collection, count: int) -> list[tuple[str, list[str]]]:
    """(query, documents) for `count` dev queries, shortest first: the query's judged document, then documents
    judged for the other chosen queries, so a reader sees the model rank real text of the split it was selected on."""
    judged = {
        query_id: sorted(doc_id for doc_id, relevance in dev.qrels[query_id].items() if relevance > 0)
        for query_id in dev.queries
    }
    judged = {query_id: doc_ids for query_id, doc_ids in judged.items() if doc_ids}

    def length(query_id: str) -> int:
        return len(dev.queries[query_id]) + len(dev.corpus[judged[query_id][0]])

    chosen = sorted(judged, key=lambda query_id: (length(query_id), query_id))[:count]
    examples = []
    for query_id in chosen:
        others = [judged[other][0] for other in chosen if judged[other][0] not in judged[query_id]]
        documents = [judged[query_id][0], *dict.fromkeys(others)][:DOCUMENTS_PER_EXAMPLE]
        examples.append((dev.queries[query_id], [dev.corpus[doc_id] for doc_id in documents]))
    return examples


def fill_card_data(model, model_args, training_set: TrainingSet, start_path: str) -> None:
    """Put what the run knows into sentence-transformers' card data (the card's YAML header and model details),
    before the trainer reads it: the starting checkpoint's Hub id (when given) as base model, language, licence, the
    training data's name, and widget and usage examples from dev queries and their judged documents (the trainer
    would otherwise pick random training texts). `start_path` is the start the run trained, which with
    --candidate_starts may be another folder than --model_name_or_path: its licence is the one that applies, and
    --base_model names --model_name_or_path, so another start gets no base model rather than a wrong one."""
    card_data = model.model_card_data
    # Assigned: set_base_model would look it up on the Hub.
    card_data.base_model = model_args.base_model if start_path == model_args.model_name_or_path else None
    card_data.set_language(model_args.language)
    card_data.set_license(model_args.license or starting_licence(start_path))
    card_data.train_datasets = [{"name": training_set.name}]
    examples = dev_examples(training_set.dev, WIDGET_EXAMPLES)
    if card_data.pipeline_tag == "sentence-similarity":
        card_data.widget = [{"source_sentence": query, "sentences": documents} for query, documents in examples]
    else:  # feature extraction (sparse models): one text per entry
        card_data.widget = [{"text": text} for query, documents in examples for text in (query, documents[0])]
    query, documents = examples[0]
    card_data.usage_examples = [query, *documents]


def _unprefixed(metrics: dict, split: str) -> dict:
    return {key.removeprefix(f"{split}_"): round(value, 4) for key, value in metrics.items() if key.startswith(f"{split}_")}


def seed_decoder_settings(path: str) -> dict | None:
    """The weak decoder a SEED pretraining folder was trained with; None for other checkpoints."""
    config_file = Path(path) / "config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    if config.get("model_type") != "seed_encoder":
        return None
    return {key: config.get(key) for key in ("decoder_num_layers", "decoder_attention_span", "decoder_loss_weight")}


def curves(plans: list[RoundPlan], start_metrics: dict, metric_key: str) -> tuple[list, list]:
    """(step, training loss) and (step, dev metric) over all rounds, steps counted across rounds."""
    losses, dev, offset = [], [(0, start_metrics[metric_key])], 0
    for plan in plans:
        history = plan.log_history()
        losses += [(offset + entry["step"], entry["loss"]) for entry in history if "loss" in entry]
        dev += [(offset + entry["step"], entry[f"eval_{metric_key}"]) for entry in history if f"eval_{metric_key}" in entry]
        offset += max((entry["step"] for entry in history), default=0)
    return losses, dev


def plot_training_curves(losses: list, dev: list, metric_label: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, loss_axes = plt.subplots(figsize=(7, 4))
    if losses:
        loss_axes.plot(*zip(*losses), "-", color="tab:blue", label="training loss")
    loss_axes.set_xlabel("step (all rounds)")
    loss_axes.set_ylabel("training loss")
    metric_axes = loss_axes.twinx()
    metric_axes.plot(*zip(*dev), "o--", color="tab:orange", label=metric_label)
    metric_axes.set_ylabel(metric_label)
    handles = loss_axes.get_legend_handles_labels()[0] + metric_axes.get_legend_handles_labels()[0]
    loss_axes.legend(handles, [handle.get_label() for handle in handles], loc="center right")
    loss_axes.set_title("seed-encoder fine-tuning")
    loss_axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def describe_recipe(recipe, loss) -> dict:
    if recipe.negatives == "none":
        negatives = "in-batch (and a --train_file's own negatives, when it has them)"
    else:
        source = {
            "bm25": "BM25",
            "self": "BM25 in round 1, then the model's own index (ANCE-style)",
            "model": "the model's own index, re-mined before every round",
        }[recipe.negatives]
        if recipe.negatives in ("self", "model") and recipe.mining_index == IVF:
            source += f", searched approximately (a faiss IVF index, {recipe.mining_nprobe} lists a query)"
        negatives = (
            f"{recipe.negatives_per_query} per pair, drawn from ranks {recipe.negatives_range_min + 1}-"
            f"{recipe.negatives_range_max} of {source}, judged positives excluded"
        )
    teacher = "none"
    if recipe.teacher:
        scale = {OWN_SCALE: "the student's own spread", SIMILARITY_SCALE: "1 / similarity_scale"}[recipe.teacher_label_scale]
        teacher = f"{' + '.join(recipe.teacher)} ({recipe.distillation}, scores standardised, averaged, times {scale})"
    name = type(loss).__name__
    if isinstance(loss, (SpladeLoss, CachedSpladeLoss)):  # it wraps the ranking loss it regularises
        name = f"{name}({type(loss.loss).__name__})"
    return {"loss": name, "negatives": negatives, "rounds": recipe.mining_rounds, "teacher": teacher}


def final_choice(best: RoundPlan | None, decision_line: str) -> str:
    final = "the starting checkpoint" if best is None else f"round {best.number}"
    return f"The final model is {final}. {decision_line}"


def write_model_card(
    folder: Path, *, plans, best, start_metrics, test_metrics, model_args, data_args, recipe_summary, training_args,
    training_set, start_path: str, starting_kind, model_class: str, model_description: str,
    extra_columns: list[tuple[str, str]], decision_line: str, lengths: dict, start_choice_line: str | None = None,
) -> None:
    """Append the fine-tuning section to the card sentence-transformers wrote into `folder`, with its plot. `best` is
    the published round, or None when the start was kept; `decision_line` says why; `lengths` holds the training
    and published lengths; `start_choice_line` says how the start was chosen among --candidate_starts, when there
    were some."""
    metric_key = f"dev_{PRIMARY_METRIC}"
    plot_training_curves(*curves(plans, start_metrics, metric_key), f"dev {PRIMARY_METRIC}", folder / CURVES_PLOT)
    start_row = "starting checkpoint" + (" (final)" if best is None else "")
    rows = [{"model": start_row, "split": "dev", "metrics": _unprefixed(start_metrics, "dev")}]
    rows += [
        {"model": f"round {plan.number}" + (" (final)" if plan is best else ""), "split": "dev",
         "metrics": _unprefixed(plan.dev_metrics(), "dev")}
        for plan in plans
    ]
    if test_metrics is not None:
        rows.append({"model": "final", "split": data_args.eval_split, "metrics": _unprefixed(test_metrics, data_args.eval_split)})
    section = Template(model_card_template(TEMPLATE)).render(
        model_class=model_class,
        model_description=model_description,
        start={"path": start_path, "kind": starting_kind, "seed": seed_decoder_settings(start_path),
               "choice": start_choice_line},
        recipe=recipe_summary,
        data_description=training_set.description,
        training={
            "batch_size": training_args.per_device_train_batch_size * training_args.world_size
            * training_args.gradient_accumulation_steps,
            "world_size": training_args.world_size,
            "learning_rate": training_args.learning_rate,
            "epochs": training_args.num_train_epochs,
            "seed": training_args.seed,
        },
        evaluation_rows=rows,
        extra_columns=extra_columns,
        final_choice=final_choice(best, decision_line),
        lengths=lengths,
        kept_start=best is None,
        command=shlex.join(sys.argv),
        recipe_file=recipe_of_run(training_args.config),
    )
    card = folder / "README.md"
    existing = card.read_text(encoding="utf-8") if card.is_file() else ""
    card.write_text(existing.rstrip() + "\n" + section, encoding="utf-8")
