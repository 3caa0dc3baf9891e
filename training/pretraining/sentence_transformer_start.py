"""A SentenceTransformer folder as the start of pretraining (e.g. all-MiniLM-L6-v2, to adapt it to a corpus): its
Transformer module gives the encoder's weights, its Pooling module the vector the decoder reads (`decoder_condition`),
and the pretraining folder is written with the same modules, so that it retrieves as the start did: the same pooling,
the same normalisation."""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from modeling_seed.configuration_seed import DECODER_CONDITIONS

from ..common.errors import InputError
from ..common.serving import LEGACY_POOLING_FLAGS

MODULES_FILE = "modules.json"
# What a SentenceTransformer folder keeps beside its modules' folders.
FOLDER_FILES = ("config_sentence_transformers.json",)
TRANSFORMER_FILES = ("sentence_bert_config.json",)


# Not common.models' reader: that module imports sentence-transformers, which a pretraining run does not otherwise load.
def _read_json(path: Path) -> dict | list:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise InputError(f"{path}: cannot be read as JSON ({error}). Check the SentenceTransformer folder is complete.") from None


@dataclass(frozen=True)
class SentenceTransformerStart:
    folder: Path  # the SentenceTransformer folder
    modules: list[dict]  # its modules.json
    transformer_folder: Path  # where its Transformer module's checkpoint is
    pooling_mode: str | None  # its Pooling module's mode, None without one

    @property
    def decoder_condition(self) -> str:
        """The condition that makes the decoder read the vector this model retrieves with."""
        if self.pooling_mode not in DECODER_CONDITIONS:
            raise InputError(
                f"--model_name_or_path {self.folder}: a SentenceTransformer with {self.pooling_mode or 'no'} pooling, "
                f"and the decoder reads only a [CLS] state or a masked mean. Pass --decoder_condition "
                f"({' or '.join(DECODER_CONDITIONS)}) to say which one it should read."
            )
        return self.pooling_mode


def pooling_mode(config: dict) -> str:
    """A Pooling config's mode, written as sentence-transformers 6 writes it or with the booleans of earlier versions."""
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        return mode if isinstance(mode, str) else "+".join(mode)
    modes = [mode for mode, flag in LEGACY_POOLING_FLAGS.items() if config.get(flag)]
    return "+".join(modes) or "mean"


def read_sentence_transformer_start(path: str) -> SentenceTransformerStart | None:
    """The SentenceTransformer in `path`, or None where the folder is a bare checkpoint (no modules.json)."""
    folder = Path(path)
    if not (folder / MODULES_FILE).is_file():
        return None
    modules = _read_json(folder / MODULES_FILE)
    transformers = [module for module in modules if module.get("type", "").endswith(".Transformer")]
    if len(transformers) != 1:
        raise InputError(
            f"--model_name_or_path {path}: its modules.json has {len(transformers)} Transformer modules; pretraining "
            "starts from a SentenceTransformer with one (Transformer, then Pooling, optionally Normalize)."
        )
    poolings = [module for module in modules if module.get("type", "").endswith(".Pooling")]
    mode = pooling_mode(_read_json(folder / poolings[0]["path"] / "config.json")) if poolings else None
    return SentenceTransformerStart(
        folder=folder, modules=modules, transformer_folder=folder / transformers[0].get("path", ""), pooling_mode=mode
    )


def write_sentence_transformer_modules(start: SentenceTransformerStart, folder: Path) -> None:
    """Make the checkpoint in `folder` a SentenceTransformer with `start`'s modules: the Transformer module at the top of
    the folder, where the checkpoint is, and copies of the others (pooling, normalisation, ...)."""
    modules = []
    for module in start.modules:
        if module.get("type", "").endswith(".Transformer"):
            for name in TRANSFORMER_FILES:
                if (start.transformer_folder / name).is_file():
                    shutil.copy2(start.transformer_folder / name, folder / name)
            module = {**module, "path": ""}
        elif module.get("path") and (start.folder / module["path"]).is_dir():  # Normalize may have no folder
            shutil.copytree(start.folder / module["path"], folder / module["path"], dirs_exist_ok=True)
        modules.append(module)
    for name in FOLDER_FILES:
        if (start.folder / name).is_file():
            shutil.copy2(start.folder / name, folder / name)
    (folder / MODULES_FILE).write_text(json.dumps(modules, indent=2) + "\n", encoding="utf-8")
