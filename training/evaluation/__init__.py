"""Retrieval evaluation on BEIR-layout collections: BM25, dense, sparse and hybrid retrievers, ranx metrics, and
an evaluator the sentence-transformers trainers call during fine-tuning."""
