"""A SEED pretraining folder written as plain BERT, the library function behind `training/export.py`: its encoder and
MLM head as a `BertForMaskedLM` folder, or, for a folder pre-trained from a SentenceTransformer (which keeps the
start's modules), a SentenceTransformer over a `BertModel` with those modules."""

import shutil
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData, metadata_load
from transformers import AutoTokenizer

from modeling_seed import SeedEncoderConfig, SeedEncoderForMaskedLM, as_bert_for_masked_lm

from ..common.errors import InputError
from ..common.model_cards import model_card_template
from ..common.models import load_sentence_transformer, model_kind, transformer_config
from ..common.serving import add_serving_fields
from ..common.output_dir import check_export_dir, clear_output_dir, publish_final_model, staging_dir

TEMPLATE = "plain_bert_export.md"
# The MLM head's weights: a SEED folder saved without them (an encoder alone) has nothing to export as a masked LM.
MLM_HEAD_PREFIX = "cls."


def check_seed_checkpoint(path: str) -> str:
    """Refuse (InputError) a folder that holds no whole SEED checkpoint; else its `model_kind`: 'transformers', or
    'sentence-transformer' for one pre-trained from a SentenceTransformer, which keeps the start's modules."""
    folder = Path(path)
    if not folder.is_dir():
        raise InputError(f"{path}: no such folder. Pass a SEED pretraining folder (`training/pretrain.py`'s --output_dir).")
    config = transformer_config(path) if (folder / "config.json").is_file() else {}
    if config.get("model_type") != SeedEncoderConfig.model_type:
        checkpoints = sorted(folder.glob("checkpoint-*/config.json"))
        hint = (
            f" It holds the checkpoint(s) of an unfinished run: export one of them, e.g. {checkpoints[-1].parent}."
            if checkpoints else ""
        )
        what = f"model_type {config['model_type']!r}" if config.get("model_type") else "no config.json"
        raise InputError(
            f"{path}: not a SEED pretraining checkpoint ({what}; a SEED folder's config.json has model_type "
            f"{SeedEncoderConfig.model_type!r}).{hint} Only SEED checkpoints need exporting: a fine-tuned retriever "
            "is already saved as plain BERT."
        )
    return model_kind(path)  # refuses a config.json without weights


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


def render_card(source: str, config: SeedEncoderConfig, repo_id: str, sentence_transformer: bool) -> ModelCard:
    source_card = Path(source) / "README.md"
    licence = (metadata_load(source_card) or {}).get("license") if source_card.is_file() else None
    card_data = ModelCardData(
        library_name="transformers",
        license=licence,
        pipeline_tag="sentence-similarity" if sentence_transformer else "fill-mask",
        tags=["seed-encoder", "bert", "sentence-transformers" if sentence_transformer else "fill-mask", "pretraining"],
    )
    return ModelCard.from_template(
        card_data,
        template_str=model_card_template(TEMPLATE),
        model_name=repo_id,
        repo_id=repo_id,
        source=source,
        config=config,
        sentence_transformer=sentence_transformer,
    )


def export_plain_bert(seed_folder: str, output_dir: str, overwrite_output_dir: bool = False) -> Path:
    """Write `seed_folder` to `output_dir` as plain BERT, with its tokenizer and a card: its encoder and MLM head as
    `BertForMaskedLM`, or a SentenceTransformer over `BertModel` where the folder keeps a SentenceTransformer's modules.
    Every input is checked before anything is written, and the folder appears whole or not at all."""
    sentence_transformer = check_seed_checkpoint(seed_folder) == "sentence-transformer"
    target = Path(output_dir)
    if target.resolve() == Path(seed_folder).resolve():
        raise InputError(f"--output_dir {output_dir}: is the SEED folder itself. Choose another folder.")
    check_export_dir(output_dir, overwrite_output_dir)
    if sentence_transformer:
        # Pre-trained from a SentenceTransformer (e.g. adapted all-MiniLM-L6-v2): a retriever with the start's modules.
        retriever = load_sentence_transformer(seed_folder)  # its encoder as plain BertModel

        def write(staged: Path) -> None:
            retriever.save(str(staged))
            add_serving_fields(staged, retriever.max_seq_length)
    else:
        masked_lm = as_bert_for_masked_lm(load_masked_lm(seed_folder))
        tokenizer = AutoTokenizer.from_pretrained(seed_folder, local_files_only=True)

        def write(staged: Path) -> None:
            masked_lm.save_pretrained(staged)
            tokenizer.save_pretrained(staged)

    config = SeedEncoderConfig.from_pretrained(seed_folder)
    if overwrite_output_dir:
        clear_output_dir(output_dir)
    staged = staging_dir(output_dir)
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    write(staged)
    render_card(seed_folder, config, target.resolve().name, sentence_transformer).save(staged / "README.md")
    publish_final_model(output_dir)
    return target
