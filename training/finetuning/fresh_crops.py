"""Fresh crops every epoch for unsupervised crop pairs (Contriever's way of training on them).

One fixed pair of crops per passage is learnt by heart within a few epochs: measured on the no-argument chain's
own dev split (`benchmarks/crop_pairs.py`), training on the fixed pairs lowers the loss while dev nDCG@10 falls,
and drawing new crops of the training passages instead lifts it. So each epoch, every training example's query and
positive are two new random crops of its passage. The draw is seeded by the run's seed, the round, the epoch and
the query, so a resumed run sees the crops the interrupted one saw. Mined negatives stay what they were mined as:
the corpus' crops of other passages.
"""

import math
import random

from datasets import Dataset
from transformers import TrainerCallback

from .training_set import TrainingSet
from .pseudo_queries import random_crop

PASSAGE_COLUMN, QUERY_ID_COLUMN = "passage", "query_id"  # what the draw reads; the loss never sees them


class FreshCrops(TrainerCallback):
    """Makes a round's examples dataset draw its query and positive columns afresh each epoch; added to the round's
    Trainer, it learns the epoch from `on_epoch_begin`, which the Trainer calls before it reads the epoch's batches."""

    def __init__(self, seed: str):
        self.seed = seed
        self.epoch = 0

    def apply(self, dataset: Dataset, training_set: TrainingSet, query_ids: list[str]) -> Dataset:
        """`dataset` (one row per example of `query_ids`) with the query and positive of each crop pair drawn on each
        read; other pseudo-queries (a sentence, a title) keep theirs."""
        passages = [training_set.passages.get(query_id, "") for query_id in query_ids]
        dataset = dataset.add_column(PASSAGE_COLUMN, passages)
        dataset = dataset.add_column(QUERY_ID_COLUMN, query_ids)
        dataset.set_transform(self.draw)
        return dataset

    def draw(self, batch: dict) -> dict:
        columns = {name: values for name, values in batch.items() if name not in (PASSAGE_COLUMN, QUERY_ID_COLUMN)}
        queries, positives = list(columns["query"]), list(columns["positive"])
        for row, (query_id, passage) in enumerate(zip(batch[QUERY_ID_COLUMN], batch[PASSAGE_COLUMN])):
            if not passage:
                continue
            rng = random.Random(f"{self.seed}/{self.epoch}/{query_id}")
            words = passage.split()
            queries[row] = random_crop(words, rng)
            positives[row] = random_crop(words, rng)
        return {**columns, "query": queries, "positive": positives}

    def on_epoch_begin(self, args, state, control, **kwargs):
        # A resumed run starts mid-epoch: state.epoch is then fractional, and its whole part is the epoch it is in.
        self.epoch = math.floor(state.epoch + 1e-6)
