"""SEED-Encoder pretraining: arguments, corpus, tokenizer, model source, Trainer, model card; `run_pretraining`."""
