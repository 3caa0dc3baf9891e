"""Retrieval fine-tuning: training data, mined negatives, teachers, losses, rounds, model card; `run_finetuning`."""
