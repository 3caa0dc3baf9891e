"""Model card templates: the Markdown files of the project's `model_cards/` folder, where they are edited.

setup.py installs that folder as `training/model_cards/` (package data), beside this package; a
source checkout (installed editable, or only on `sys.path`) keeps it at the top of the checkout.
"""

from pathlib import Path

INSTALLED_TEMPLATES = Path(__file__).resolve().parents[1] / "model_cards"
SOURCE_TEMPLATES = Path(__file__).resolve().parents[2] / "model_cards"


def model_card_template(name: str) -> str:
    """The text of the template `model_cards/<name>` (e.g. "seed_encoder.md")."""
    templates = INSTALLED_TEMPLATES if INSTALLED_TEMPLATES.is_dir() else SOURCE_TEMPLATES
    return (templates / name).read_text(encoding="utf-8")
