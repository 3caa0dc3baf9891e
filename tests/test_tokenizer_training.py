"""The WordPiece tokenizer trained on a corpus is a function of the corpus and the settings alone: the
same text gives the same tokenizer.json, byte for byte, in any process; and it learns what
`tokenizers`' own WordPiece trainer learns."""

import subprocess
import sys
from collections import Counter

import pytest
from datasets import Dataset
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from pretrain_helpers import subprocess_env, write_lines
from training.pretraining.tokenizer import (
    SPECIAL_TOKENS, tokenizer_training_texts, train_wordpiece_tokenizer, wordpiece_vocabulary,
)

SPECIALS = list(SPECIAL_TOKENS.values())


@pytest.fixture(scope="module")
def lines(pretrain_lines):
    return pretrain_lines(600)


def train_in_a_new_process(corpus, output_dir, hash_seed: str) -> bytes:
    program = (
        "import sys\n"
        "from training.pretraining.tokenizer import train_wordpiece_tokenizer\n"
        "texts = open(sys.argv[1], encoding='utf-8').read().splitlines()\n"
        "train_wordpiece_tokenizer(texts, vocab_size=1000, model_max_length=128).save_pretrained(sys.argv[2])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program, str(corpus), str(output_dir)],
        env=subprocess_env(PYTHONHASHSEED=hash_seed), capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return (output_dir / "tokenizer.json").read_bytes()


@pytest.mark.slow
def test_two_processes_with_different_hash_seeds_write_byte_identical_tokenizers(lines, tmp_path):
    corpus = write_lines(tmp_path / "corpus.txt", lines)

    first = train_in_a_new_process(corpus, tmp_path / "first", hash_seed="1")
    second = train_in_a_new_process(corpus, tmp_path / "second", hash_seed="2")

    assert len(first) > 10_000
    assert first == second


def test_vocabulary_is_what_tokenizers_wordpiece_trainer_learns(lines):
    reference = Tokenizer(models.WordPiece(unk_token=SPECIAL_TOKENS["unk_token"]))
    reference.normalizer = normalizers.BertNormalizer()
    reference.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    reference.train_from_iterator(
        lines, trainers.WordPieceTrainer(vocab_size=1000, special_tokens=SPECIALS, show_progress=False)
    )

    ours = set(train_wordpiece_tokenizer(lines, vocab_size=1000, model_max_length=128).get_vocab())

    # Only ties between equally frequent pairs may be broken differently (the reference breaks them by chance).
    theirs = set(reference.get_vocab())
    assert len(ours) == 1000
    assert len(ours & theirs) >= 0.99 * len(theirs)


def test_vocabulary_lists_special_tokens_then_characters_then_continuations_then_merges():
    vocabulary = wordpiece_vocabulary(Counter({"ba": 3, "ab": 1}), vocab_size=20, special_tokens=SPECIALS)

    assert vocabulary == [*SPECIALS, "a", "b", "##a", "##b", "ba", "ab"]


# "ab" and "cd" start from 4 characters and 2 continuations: one more entry is one merge.
ONE_MERGE = len(SPECIALS) + 6 + 1


def test_most_frequent_pair_merges_first():
    vocabulary = wordpiece_vocabulary(Counter({"ab": 2, "cd": 3}), vocab_size=ONE_MERGE, special_tokens=SPECIALS)

    assert vocabulary[len(SPECIALS):] == ["a", "b", "c", "d", "##b", "##d", "cd"]


@pytest.mark.parametrize("word_order", [["ab", "cd"], ["cd", "ab"]])
def test_equally_frequent_pairs_merge_in_vocabulary_order_whatever_the_word_order(word_order):
    word_counts = Counter({word: 2 for word in word_order})

    vocabulary = wordpiece_vocabulary(word_counts, vocab_size=ONE_MERGE, special_tokens=SPECIALS)

    assert vocabulary[len(SPECIALS):] == ["a", "b", "c", "d", "##b", "##d", "ab"]


def test_trained_tokenizer_splits_unseen_words_into_known_pieces_and_wraps_in_cls_and_sep(lines):
    tokenizer = train_wordpiece_tokenizer(lines, vocab_size=1000, model_max_length=128)

    encoded = tokenizer("The Unconstitutionality")

    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert tokens[1] == "the"
    assert len(tokens) > 4 and all(piece.startswith("##") for piece in tokens[3:-1])
    assert "[UNK]" not in tokens
    assert tokenizer.decode(encoded["input_ids"], skip_special_tokens=True) == "the unconstitutionality"


def test_a_corpus_beyond_the_limit_is_learnt_from_a_sample_drawn_with_the_seed(lines):
    """So the time to learn a vocabulary stops growing with the corpus, and the same command learns the same one."""
    corpus = Dataset.from_dict({"text": lines})
    texts, description = tokenizer_training_texts(corpus, "text", 100, seed=3)
    sample = list(texts)
    again = list(tokenizer_training_texts(corpus, "text", 100, seed=3)[0])
    other_seed = list(tokenizer_training_texts(corpus, "text", 100, seed=4)[0])
    rows = [lines.index(text) for text in sample]

    assert len(sample) == len(set(sample)) == 100 and set(sample) <= set(lines)
    assert rows == sorted(rows) and max(rows) > 300  # in corpus order, drawn from all of it, not its head
    assert sample == again and sample != other_seed
    assert description == "100 of the corpus' 600 texts, drawn with seed 3"


def test_a_corpus_within_the_limit_is_learnt_whole_in_its_order(lines):
    corpus = Dataset.from_dict({"text": lines})
    texts, description = tokenizer_training_texts(corpus, "text", 600, seed=3)

    assert list(texts) == lines
    assert description == "all 600 texts of the corpus"


def test_a_stream_is_learnt_from_its_first_texts(lines):
    stream = Dataset.from_dict({"text": lines}).to_iterable_dataset()
    texts, description = tokenizer_training_texts(stream, "text", 50, seed=3)

    assert list(texts) == lines[:50]
    assert description == "the first 50 texts of the stream"
