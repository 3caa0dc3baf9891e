"""What the tools that serve embedding models read of a sentence-transformers folder, beside what
sentence-transformers 6 writes.

text-embeddings-inference (TEI) fails to parse `sentence_bert_config.json` without `max_seq_length` (its maximum
input length), and takes its pooling from the `pooling_mode_cls_token` / `pooling_mode_mean_tokens` booleans of
`1_Pooling/config.json`, which sentence-transformers wrote before version 6; version 6 writes one `pooling_mode`
string, and reads either form (the booleans are dropped where `pooling_mode` is given). A published folder carries
both, so it loads in sentence-transformers and serves in TEI without a `--pooling` flag.
"""

import json
from pathlib import Path

# sentence-transformers' pooling modes and the boolean each had before version 6.
LEGACY_POOLING_FLAGS = {
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "mean": "pooling_mode_mean_tokens",
    "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
    "weightedmean": "pooling_mode_weightedmean_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}


def _update_json(path: Path, fields: dict) -> None:
    config = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**config, **fields}, indent=4) + "\n", encoding="utf-8")


def add_serving_fields(folder: Path, max_seq_length: int) -> None:
    """Add TEI's fields to the sentence-transformers model saved in `folder`: `max_seq_length` to its Transformer's
    `sentence_bert_config.json`, the pooling booleans to its Pooling module's config."""
    for module in json.loads((folder / "modules.json").read_text(encoding="utf-8")):
        module_dir = folder / module.get("path", "")
        if module["type"].endswith(".Transformer"):
            _update_json(module_dir / "sentence_bert_config.json", {"max_seq_length": max_seq_length})
        elif module["type"].endswith(".Pooling"):
            config = json.loads((module_dir / "config.json").read_text(encoding="utf-8"))
            modes = config["pooling_mode"]
            modes = {modes} if isinstance(modes, str) else set(modes)
            _update_json(module_dir / "config.json", {flag: mode in modes for mode, flag in LEGACY_POOLING_FLAGS.items()})
