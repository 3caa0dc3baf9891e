"""The tokenizer for a pretraining run: a given one, or a WordPiece vocabulary trained on the corpus."""

from collections.abc import Iterable, Iterator

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from ..common.errors import InputError

SPECIAL_TOKENS = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"}


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


def train_wordpiece_tokenizer(
    texts: Iterable[str], vocab_size: int, model_max_length: int, lowercase: bool = True
) -> PreTrainedTokenizerFast:
    """A BERT-style WordPiece tokenizer ([CLS] text [SEP]) trained on `texts`.

    Training is not deterministic across processes (tie-breaking follows hash order), so a
    distributed run trains it once and shares the result.
    """
    backend = Tokenizer(models.WordPiece(unk_token=SPECIAL_TOKENS["unk_token"]))
    backend.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS.values()),
        show_progress=True,
    )
    backend.train_from_iterator(_batches(texts), trainer=trainer)
    cls_token, sep_token = SPECIAL_TOKENS["cls_token"], SPECIAL_TOKENS["sep_token"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls_token} $A {sep_token}",
        pair=f"{cls_token} $A {sep_token} $B:1 {sep_token}:1",
        special_tokens=[(cls_token, backend.token_to_id(cls_token)), (sep_token, backend.token_to_id(sep_token))],
    )
    return wordpiece_tokenizer_from_json(backend.to_str(), model_max_length)


def wordpiece_tokenizer_from_json(serialized: str, model_max_length: int) -> PreTrainedTokenizerFast:
    """The transformers tokenizer around a serialized `tokenizers` backend (how ranks share one trained tokenizer)."""
    backend = Tokenizer.from_str(serialized)
    return PreTrainedTokenizerFast(tokenizer_object=backend, model_max_length=model_max_length, **SPECIAL_TOKENS)


def _batches(texts: Iterable[str], size: int = 1000) -> Iterator[list[str]]:
    batch = []
    for text in texts:
        batch.append(text)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
