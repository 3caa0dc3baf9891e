"""Pseudo-queries: training pairs made from a corpus alone, without a query or a judgment.

Four kinds, each a (query, the document it must find) pair drawn from one passage:
- `crops`: two independent random crops of the passage (Contriever); fine-tuning draws new ones every epoch;
- `sentences`: one sentence of the passage as the query, removed from the document it must find 90% of the time
  (the Inverse Cloze Task, Lee et al. 2019: the model cannot learn to match only the words they share, and still
  sees the sentence in context the other 10%);
- `titles`: a corpus record's title as the query of its text;
- `leads`: a passage's first sentence, cut from it as a `sentences` query is: where a corpus has no titles, the
  sentence that most often says what the passage is about (an abstract's background or aim, a news story's lead).
Mixed kinds give each passage one pair, its kind drawn among those the passage allows, so that no two documents of
the training corpus come from one passage (they would be each other's false negatives when mining).
"""

import random
import re
from dataclasses import dataclass

CROPS, SENTENCES, TITLES, LEADS = "crops", "sentences", "titles", "leads"
PSEUDO_QUERY_KINDS = (CROPS, SENTENCES, TITLES, LEADS)
# Contriever's crops: each a contiguous span of 10-50% of the passage, here at least a few words.
CROP_RATIO = (0.1, 0.5)
MIN_CROP_WORDS = 4
ICT_REMOVAL_RATE = 0.9
# A sentence ends at ., ! or ? followed by space and what starts a sentence; "e.g. the" or "p < 0.05" do not split.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\"'\[])")


@dataclass(frozen=True)
class PseudoPair:
    kind: str
    query: str
    document: str
    removed: bool = False  # sentences and leads: whether the query sentence was cut from its document


def random_crop(words: list[str], rng: random.Random) -> str:
    low, high = (max(MIN_CROP_WORDS, round(len(words) * ratio)) for ratio in CROP_RATIO)
    length = min(len(words), rng.randint(low, high))
    start = rng.randint(0, len(words) - length)
    return " ".join(words[start : start + length])


def split_sentences(text: str) -> list[str]:
    return [sentence for sentence in SENTENCE_END.split(text.strip()) if sentence]


def kinds_for(passage: str, title: str | None, kinds: tuple[str, ...]) -> list[str]:
    """The kinds of `kinds` that `passage` (with its `title`) can make a pair of."""
    possible = []
    if CROPS in kinds and len(passage.split()) >= 2 * MIN_CROP_WORDS:
        possible.append(CROPS)
    sentence_kinds = [kind for kind in (SENTENCES, LEADS) if kind in kinds]  # both need two sentences
    if sentence_kinds and len(split_sentences(passage)) >= 2:
        possible.extend(sentence_kinds)
    if TITLES in kinds and title and title.strip() and passage.strip():
        possible.append(TITLES)
    return possible


def crop_pair(passage: str, rng: random.Random) -> PseudoPair:
    words = passage.split()
    return PseudoPair(CROPS, random_crop(words, rng), random_crop(words, rng))


def sentence_pair(passage: str, rng: random.Random, lead: bool = False) -> PseudoPair:
    """A sentence of `passage` (its first with `lead`, else one drawn) as the query, cut from the document it must
    find with probability ICT_REMOVAL_RATE."""
    sentences = split_sentences(passage)
    chosen = 0 if lead else rng.randrange(len(sentences))
    removed = rng.random() < ICT_REMOVAL_RATE
    document = " ".join(sentence for index, sentence in enumerate(sentences) if index != chosen) if removed else passage
    return PseudoPair(LEADS if lead else SENTENCES, sentences[chosen], document, removed)


def pseudo_pair(passage: str, title: str | None, kinds: tuple[str, ...], rng: random.Random) -> PseudoPair | None:
    """One pair from `passage`, of a kind drawn among those it allows; None when it allows none."""
    possible = kinds_for(passage, title, kinds)
    if not possible:
        return None
    # No draw when there is no choice: a crops-only run draws exactly the crops it drew before kinds existed.
    kind = possible[rng.randrange(len(possible))] if len(possible) > 1 else possible[0]
    if kind == CROPS:
        return crop_pair(passage, rng)
    if kind in (SENTENCES, LEADS):
        return sentence_pair(passage, rng, lead=kind == LEADS)
    return PseudoPair(TITLES, title.strip(), passage)


def describe_kinds(kinds: tuple[str, ...]) -> str:
    """The kinds, as the model card says them."""
    words = {
        CROPS: "independent random crops of one passage (Contriever; new crops every epoch unless a teacher scored "
        "the fixed pairs)",
        SENTENCES: f"one sentence of a passage as the query, cut from the passage it must find "
        f"{ICT_REMOVAL_RATE:.0%} of the time (Inverse Cloze Task)",
        TITLES: "a record's title as the query of its text",
        LEADS: f"a passage's first sentence as the query, cut from the passage it must find {ICT_REMOVAL_RATE:.0%} "
        "of the time",
    }
    return "; ".join(words[kind] for kind in kinds)
