"""Named SEED-Encoder shapes for `--config_name`; every other field keeps `SeedEncoderConfig`'s default."""

PRESETS = {
    # Demos and tests: pre-trains in minutes on two CPU cores, with a WordPiece vocabulary trained on the corpus.
    "seed-tiny": dict(
        vocab_size=8000, hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512,
        max_position_embeddings=512,
    ),
    # The all-MiniLM-L6-v2 shape, with BERT's uncased vocabulary size.
    "seed-small": dict(
        vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
    ),
    # The paper's encoder: BERT-base with a 3-layer, span-2 weak decoder.
    "seed-base": dict(
        vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
    ),
}

