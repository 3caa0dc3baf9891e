"""What fine-tuning trains and selects on, whichever source made it (`data.py`, `passage_pairs.py`)."""

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..data.collection import Collection

DEV_SPLIT = "dev"


@dataclass
class TrainingSet:
    """Training queries, the corpus they are judged against, and what was judged.

    qrels holds every judgment of the training queries (relevance 0 = judged not relevant), so
    mining can exclude every judged positive; `given_negatives` are the negatives a pairs file
    brought along; `dev` is the collection model selection is measured on. `name` is the data's
    name on the model card (a folder's or file's name), `description` says what was made of it.
    """

    # Made of passages, the queries and their judgments are views of the written pairs (`passage_pairs.py`)
    queries: Mapping[str, str]
    corpus: Mapping[str, str]  # packed when read from a BEIR folder or made of passages; a dict when made of pairs
    qrels: Mapping[str, dict[str, int]]
    dev: Collection
    name: str
    description: str
    given_negatives: dict[str, list[str]] = field(default_factory=dict)
    # Crop pairs only: the passage each crop query was cropped from (fine-tuning draws fresh crops of it).
    passages: Mapping[str, str] = field(default_factory=dict)

    def positives(self, query_id: str) -> list[str]:
        return [doc_id for doc_id, relevance in self.qrels[query_id].items() if relevance > 0]

    def pairs(self) -> list[tuple[str, str]]:
        """(query id, positive doc id) for every judged positive: one training example each."""
        return [(query_id, doc_id) for query_id in self.queries for doc_id in self.positives(query_id)]
