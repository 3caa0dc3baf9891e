"""The data both pipelines read: raw text corpora (pre-training, label-free fine-tuning) and BEIR-layout collections
(corpus, queries and judgments, for fine-tuning with labels and for evaluation)."""
