"""Pretraining and fine-tuning pipelines built on `modeling_seed` (needs the `training` extras)."""
