"""TSDAE (Wang et al., 2021) as sentence-transformers implements it, the baseline arm of the adaptation benchmark:
a SentenceTransformer encodes a damaged text, and a decoder (the start's own layers, tied to the encoder, with
cross-attention to the pooled sentence vector alone) reconstructs the original.

The noise is the paper's: each word deleted with probability 0.6 (at least one kept). sentence-transformers' legacy
`DenoisingAutoEncoderDataset` splits words with NLTK's punkt tokenizer, whose data does not install offline, so words
here are whitespace-separated; the draw is seeded, the same for the same seed.
"""

import random
import shutil
from pathlib import Path

from datasets import Dataset
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.sentence_transformer.losses import DenoisingAutoEncoderLoss

from training.data.corpus import load_raw_corpus

DELETION_PROBABILITY = 0.6


def delete_words(text: str, rng: random.Random, probability: float = DELETION_PROBABILITY) -> str:
    """`text` with each whitespace-separated word deleted with `probability`; one word survives if none does."""
    words = text.split()
    kept = [word for word in words if rng.random() >= probability]
    if not kept and words:
        kept = [rng.choice(words)]
    return " ".join(kept)


def denoising_pairs(texts: list[str], seed: int) -> Dataset:
    """(damaged, original) columns, in the order DenoisingAutoEncoderLoss reads them."""
    rng = random.Random(seed)
    return Dataset.from_dict({"damaged": [delete_words(text, rng) for text in texts], "original": texts})


def train_tsdae(
    start: Path, train_files: list[str], output_dir: Path, *, seed: int, max_steps: int, batch_size: int,
    learning_rate: float, max_seq_length: int, warmup_steps: float, weight_decay: float, precision: list[str],
) -> Path:
    """Continue the SentenceTransformer folder `start` with TSDAE on the texts of `train_files` for `max_steps` steps
    of `batch_size`, and save it to `output_dir` with the start's own max_seq_length (training reads
    `max_seq_length` tokens, as the other arms do). Written to a staging folder first: `output_dir` appears whole,
    and a run cut short starts again."""
    output_dir = Path(output_dir)
    if (output_dir / "modules.json").is_file():
        return output_dir
    staged = output_dir.with_name(output_dir.name + ".partial")
    shutil.rmtree(staged, ignore_errors=True)
    texts = load_raw_corpus(train_files, None, "text", argument="--data_dir")["text"]
    model = SentenceTransformer(str(start), device="cpu" if "--use_cpu" in precision else None)
    published_length = model.max_seq_length
    model.max_seq_length = max_seq_length
    loss = DenoisingAutoEncoderLoss(model, decoder_name_or_path=str(start), tie_encoder_decoder=True)
    arguments = SentenceTransformerTrainingArguments(
        output_dir=str(staged / "checkpoints"), seed=seed, max_steps=max_steps, per_device_train_batch_size=batch_size,
        learning_rate=learning_rate, warmup_steps=warmup_steps, weight_decay=weight_decay, lr_scheduler_type="linear",
        logging_steps=max(1, max_steps // 10), save_strategy="no", report_to="none", bf16="--bf16" in precision,
        use_cpu="--use_cpu" in precision, dataloader_pin_memory=False,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=arguments, train_dataset=denoising_pairs(texts, seed), loss=loss
    )
    trainer.train()
    model.max_seq_length = published_length
    model.save(str(staged / "model"))
    trainer.state.save_to_json(str(staged / "model" / "trainer_state.json"))
    staged.joinpath("model").replace(output_dir)
    shutil.rmtree(staged, ignore_errors=True)
    return output_dir
