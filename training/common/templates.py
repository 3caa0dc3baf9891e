"""Model card templates, read from `model_cards/` (where people edit them)."""

from pathlib import Path

TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "model_cards"


def read_template(name: str) -> str:
    return (TEMPLATES_DIR / name).read_text(encoding="utf-8")
