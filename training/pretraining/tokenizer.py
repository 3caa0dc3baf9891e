"""The tokenizer for a pretraining run (a given one, or a WordPiece vocabulary trained on the corpus), and the
corpus tokenized with it into training sequences."""

import copy
import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable

import numpy as np
from datasets import Dataset, IterableDataset
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from ..common.errors import InputError

SPECIAL_TOKENS = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"}
CONTINUING_SUBWORD_PREFIX = "##"
# Texts a new vocabulary is learnt from, at most: counting words is a Python loop (12 MB of text in 9.2 s on our CPU,
# about 20 hours a process per 100 GB), and a WordPiece vocabulary of 30k pieces is settled by far fewer texts.
DEFAULT_TOKENIZER_TRAINING_TEXTS = 200_000


def load_tokenizer(name_or_path: str, argument: str = "--tokenizer_name") -> PreTrainedTokenizerFast:
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    except (OSError, ValueError) as error:
        raise InputError(
            f"{argument} {name_or_path}: cannot load a tokenizer from it ({error}). Pass a local folder that holds "
            "tokenizer.json or vocab.txt (as written by save_pretrained)."
        ) from None
    if tokenizer.mask_token is None or tokenizer.pad_token is None:
        raise InputError(
            f"{argument} {name_or_path}: the tokenizer has no mask or padding token, which masked-language-model "
            "pretraining needs. Use a BERT-style (WordPiece) tokenizer."
        )
    return tokenizer


def tokenizer_training_texts(
    corpus: Dataset | IterableDataset, text_column: str, limit: int, seed: int
) -> tuple[Iterable[str], str]:
    """The texts a new WordPiece vocabulary is learnt from, and how they were chosen (for the log and the card): the
    whole corpus, in its order, up to `limit` texts; beyond, `limit` rows drawn with `seed`, in corpus order, so the
    same command gives the same vocabulary; from a stream, its first `limit` texts (a draw would read it whole)."""
    if isinstance(corpus, IterableDataset):
        return (record[text_column] for record in corpus.take(limit)), f"the first {limit:,} texts of the stream"
    total = len(corpus)
    if total <= limit:
        return (record[text_column] for record in corpus), f"all {total:,} texts of the corpus"
    rows = np.sort(np.random.default_rng(seed).choice(total, size=limit, replace=False))
    sample = corpus.select(rows)
    return (record[text_column] for record in sample), f"{limit:,} of the corpus' {total:,} texts, drawn with seed {seed}"


def train_wordpiece_tokenizer(
    texts: Iterable[str], vocab_size: int, model_max_length: int, lowercase: bool = True
) -> PreTrainedTokenizerFast:
    """A BERT-style WordPiece tokenizer ([CLS] text [SEP]) trained on `texts`: the same texts and
    settings give the same tokenizer, byte for byte, in every process and on every run.

    Words are normalised and split by `tokenizers`' BERT components. The vocabulary is learnt as
    `tokenizers`' WordPieceTrainer learns it (the most frequent adjacent pair of pieces merges
    first, continuation pieces carry "##", no frequency floor, every character kept), but that
    trainer numbers pieces in hash-map order and breaks ties between equally frequent pairs by
    those numbers, so its vocabulary changes from run to run; `wordpiece_vocabulary` numbers
    them in a fixed order.
    """
    normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    word_counts = Counter()
    for text in texts:
        word_counts.update([word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))])
    vocabulary = wordpiece_vocabulary(word_counts, vocab_size, list(SPECIAL_TOKENS.values()))

    ids = {token: index for index, token in enumerate(vocabulary)}
    backend = Tokenizer(models.WordPiece(ids, unk_token=SPECIAL_TOKENS["unk_token"]))
    backend.normalizer = normalizer
    backend.pre_tokenizer = pre_tokenizer
    backend.decoder = decoders.WordPiece()
    backend.add_special_tokens(list(SPECIAL_TOKENS.values()))
    cls_token, sep_token = SPECIAL_TOKENS["cls_token"], SPECIAL_TOKENS["sep_token"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls_token} $A {sep_token}",
        pair=f"{cls_token} $A {sep_token} $B:1 {sep_token}:1",
        special_tokens=[(cls_token, backend.token_to_id(cls_token)), (sep_token, backend.token_to_id(sep_token))],
    )
    return PreTrainedTokenizerFast(tokenizer_object=backend, model_max_length=model_max_length, **SPECIAL_TOKENS)


def wordpiece_vocabulary(word_counts: dict[str, int], vocab_size: int, special_tokens: list[str]) -> list[str]:
    """WordPiece vocabulary learnt from word frequencies: the special tokens, every character (sorted),
    every continuation character ("##" + character, sorted), then merged pieces in the order they
    were learnt, until `vocab_size` pieces or no pair is left to merge.

    Each step merges the adjacent pair of pieces that occurs most often, counting every occurrence
    in every word times the word's frequency. Equally frequent pairs are taken in the order of their
    pieces' positions in the vocabulary, which is fixed, so the result does not depend on hash or
    iteration order.
    """
    prefix = CONTINUING_SUBWORD_PREFIX
    characters = sorted({character for word in word_counts for character in word})
    continuations = sorted({prefix + character for word in word_counts for character in word[1:]})
    vocabulary = list(dict.fromkeys([*special_tokens, *characters, *continuations]))
    index = {piece: position for position, piece in enumerate(vocabulary)}

    words = [[index[word[0]], *(index[prefix + character] for character in word[1:])] for word in word_counts]
    frequencies = list(word_counts.values())
    pair_counts = defaultdict(int)
    words_with_pair = defaultdict(set)  # may also list words that lost the pair since: merging those changes nothing
    for word_index, (pieces, frequency) in enumerate(zip(words, frequencies)):
        for pair in zip(pieces, pieces[1:]):
            pair_counts[pair] += frequency
            words_with_pair[pair].add(word_index)
    # Counts only fall, except for pairs with a newly merged piece, which are pushed when they form;
    # an entry whose count is out of date goes back with its current count when it surfaces.
    queue = [(-count, pair) for pair, count in pair_counts.items()]
    heapq.heapify(queue)

    while len(vocabulary) < vocab_size and queue:
        negative_count, pair = heapq.heappop(queue)
        count = pair_counts[pair]
        if count != -negative_count:
            if count > 0:
                heapq.heappush(queue, (-count, pair))
            continue
        first, second = pair
        piece = vocabulary[first] + vocabulary[second].removeprefix(prefix)
        if piece not in index:  # two different merges can spell the same piece: it keeps one entry
            index[piece] = len(vocabulary)
            vocabulary.append(piece)
        merged_id = index[piece]
        formed = set()
        for word_index in words_with_pair.pop(pair):
            pieces, frequency = words[word_index], frequencies[word_index]
            for old_pair in zip(pieces, pieces[1:]):
                pair_counts[old_pair] -= frequency
            pieces = _merge_pair(pieces, first, second, merged_id)
            for new_pair in zip(pieces, pieces[1:]):
                pair_counts[new_pair] += frequency
                words_with_pair[new_pair].add(word_index)
                if merged_id in new_pair:
                    formed.add(new_pair)
            words[word_index] = pieces
        for new_pair in formed:
            heapq.heappush(queue, (-pair_counts[new_pair], new_pair))
    return vocabulary


def _merge_pair(pieces: list[int], first: int, second: int, merged: int) -> list[int]:
    """`pieces` with every occurrence of (`first`, `second`), left to right, replaced by `merged`."""
    result, position = [], 0
    while position < len(pieces):
        if position + 1 < len(pieces) and pieces[position] == first and pieces[position + 1] == second:
            result.append(merged)
            position += 2
        else:
            result.append(pieces[position])
            position += 1
    return result


def tokenize_corpus(
    dataset: Dataset | IterableDataset,
    tokenizer,
    text_column: str,
    max_seq_length: int,
    num_proc: int | None = None,
    load_from_cache_file: bool = True,
    whole_word_mask: bool = False,
) -> Dataset | IterableDataset:
    """One training sequence per passage, truncated to `max_seq_length` tokens; padding is the collator's.

    Whole-word masking finds word boundaries from offsets, so those are kept when it is on.
    """
    # Tokenizing with truncation sets it on the tokenizer's backend, and the saved tokenizer.json would then
    # depend on whether datasets' cache spared the work: a copy tokenizes, and `tokenizer` stays as it was.
    tokenizing = copy.deepcopy(tokenizer)

    def tokenize(batch):
        return tokenizing(
            batch[text_column],
            truncation=True,
            max_length=max_seq_length,
            return_special_tokens_mask=True,
            return_offsets_mapping=whole_word_mask,
        )

    if isinstance(dataset, IterableDataset):
        return dataset.map(tokenize, batched=True, remove_columns=[text_column])
    return dataset.map(
        tokenize,
        batched=True,
        num_proc=num_proc,
        remove_columns=[text_column],
        load_from_cache_file=load_from_cache_file,
        desc=f"Tokenizing (max {max_seq_length} tokens)",
    )
