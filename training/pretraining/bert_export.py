"""A SEED pretraining folder's encoder and MLM head written as a plain `BertForMaskedLM` folder: the library
function behind `training/export.py`."""

from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData, metadata_load
from transformers import AutoTokenizer

from modeling_seed import SeedEncoderConfig, SeedEncoderForMaskedLM, as_bert_for_masked_lm

from ..common.errors import InputError
from ..common.model_cards import model_card_template
from ..common.models import WEIGHT_FILES, transformer_config
from ..common.output_dir import STAGING_DIR, clear_output_dir, folder_content, publish_final_model, staging_dir

TEMPLATE = "plain_bert_export.md"
# The MLM head's weights: a SEED folder saved without them (an encoder alone) has nothing to export as a masked LM.
MLM_HEAD_PREFIX = "cls."


def check_seed_checkpoint(path: str) -> None:
    """Refuse (InputError) a folder that holds no whole SEED checkpoint."""
    folder = Path(path)
    if not folder.is_dir():
        raise InputError(f"{path}: no such folder. Pass a SEED pretraining folder (`training/pretrain.py`'s --output_dir).")
    config = transformer_config(path) if (folder / "config.json").is_file() else {}
    if config.get("model_type") != SeedEncoderConfig.model_type or (folder / "modules.json").is_file():
        checkpoints = sorted(folder.glob("checkpoint-*/config.json"))
        hint = (
            f" It holds the checkpoint(s) of an unfinished run: export one of them, e.g. {checkpoints[-1].parent}."
            if checkpoints else ""
        )
        what = f"model_type {config['model_type']!r}" if config.get("model_type") else "no config.json"
        if (folder / "modules.json").is_file():
            what = "a sentence-transformers model, whose transformer is exported as it is saved"
        raise InputError(
            f"{path}: not a SEED pretraining checkpoint ({what}; a SEED folder's config.json has model_type "
            f"{SeedEncoderConfig.model_type!r}).{hint} Only SEED checkpoints need exporting: a fine-tuned retriever "
            "is already saved as plain BERT."
        )
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise InputError(f"{path}: has a config.json but no weights ({', '.join(WEIGHT_FILES)}). Pass a complete folder.")


def load_masked_lm(path: str) -> SeedEncoderForMaskedLM:
    """The folder's encoder and MLM head, refusing (InputError) a checkpoint that lacks any of their weights: a
    head left at its random initialisation would be exported as if it were trained."""
    model, loading_info = SeedEncoderForMaskedLM.from_pretrained(path, output_loading_info=True, local_files_only=True)
    missing = sorted(loading_info["missing_keys"])
    if missing:
        head_only = all(name.startswith(MLM_HEAD_PREFIX) for name in missing)
        raise InputError(
            f"{path}: the checkpoint lacks {len(missing)} weight(s) of the encoder and MLM head ({', '.join(missing[:4])}"
            f"{', ...' if len(missing) > 4 else ''})"
            + (": it was saved as an encoder alone (SeedEncoderModel), without the MLM head a BertForMaskedLM needs."
               if head_only else ".")
            + " Export the pretraining folder that `training/pretrain.py` wrote, which holds them."
        )
    return model.eval()


def render_card(source: str, config: SeedEncoderConfig, repo_id: str) -> ModelCard:
    source_card = Path(source) / "README.md"
    licence = (metadata_load(source_card) or {}).get("license") if source_card.is_file() else None
    card_data = ModelCardData(
        library_name="transformers",
        license=licence,
        pipeline_tag="fill-mask",
        tags=["seed-encoder", "bert", "fill-mask", "pretraining"],
    )
    return ModelCard.from_template(
        card_data,
        template_str=model_card_template(TEMPLATE),
        model_name=repo_id,
        repo_id=repo_id,
        source=source,
        config=config,
    )


def export_plain_bert(seed_folder: str, output_dir: str, overwrite_output_dir: bool = False) -> Path:
    """Write `seed_folder`'s encoder and MLM head to `output_dir` as `BertForMaskedLM`, with its tokenizer and a card.
    Every input is checked before anything is written, and the folder appears whole or not at all."""
    check_seed_checkpoint(seed_folder)
    target = Path(output_dir)
    if target.resolve() == Path(seed_folder).resolve():
        raise InputError(f"--output_dir {output_dir}: is the SEED folder itself. Choose another folder.")
    leftovers = [entry for entry in folder_content(target) if entry.name != STAGING_DIR] if target.is_dir() else []
    if leftovers and not overwrite_output_dir:
        raise InputError(
            f"--output_dir {output_dir}: the folder is not empty ({', '.join(sorted(p.name for p in leftovers)[:5])}). "
            "Choose another --output_dir, or pass --overwrite_output_dir to replace its contents."
        )
    seed_model = load_masked_lm(seed_folder)
    tokenizer = AutoTokenizer.from_pretrained(seed_folder, local_files_only=True)
    bert = as_bert_for_masked_lm(seed_model)

    if overwrite_output_dir:
        clear_output_dir(output_dir)
    staged = staging_dir(output_dir)
    staged.mkdir(parents=True, exist_ok=True)
    bert.save_pretrained(staged)
    tokenizer.save_pretrained(staged)
    render_card(seed_folder, seed_model.config, target.resolve().name).save(staged / "README.md")
    publish_final_model(output_dir)
    return target
