"""Model card templates, the Markdown files of the project's `model_cards/` folder where they are edited, and the
check on the Hub id that a card names as its base model.

setup.py installs that folder as `training/model_cards/` (package data), beside this package; a
source checkout (installed editable, or only on `sys.path`) keeps it at the top of the checkout.
"""

import re
from pathlib import Path

from .errors import InputError

INSTALLED_TEMPLATES = Path(__file__).resolve().parents[1] / "model_cards"
SOURCE_TEMPLATES = Path(__file__).resolve().parents[2] / "model_cards"
# owner/name or name: letters, digits, '-', '_', '.'; what the Hub accepts as a model id in a card's metadata.
HUB_MODEL_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def model_card_template(name: str) -> str:
    """The text of the template `model_cards/<name>` (e.g. "seed_encoder.md")."""
    templates = INSTALLED_TEMPLATES if INSTALLED_TEMPLATES.is_dir() else SOURCE_TEMPLATES
    return (templates / name).read_text(encoding="utf-8")


def check_hub_model_id(value: str | None, flag: str) -> None:
    """Refuse a `flag` value that the Hub would reject as a card's `base_model` (a path, a URL). Starting checkpoints
    are local folders, whose paths never go there: `push_to_hub` fails on card metadata that the Hub refuses."""
    if value is not None and (not HUB_MODEL_ID.fullmatch(value) or ".." in value or Path(value).exists()):
        raise InputError(
            f"{flag} {value}: expected a Hub model id, such as sentence-transformers/all-MiniLM-L6-v2 (the starting "
            "checkpoint's name on the Hub). It goes into the card's base_model, where the Hub refuses local paths."
        )


def recipe_of_run(config: str | None) -> dict | None:
    """The recipe file a run's `--config` named, as its card shows it (path and text); None without one."""
    if config is None:
        return None
    return {"path": config, "text": Path(config).read_text(encoding="utf-8").strip()}
