"""Distillation: what the student is taught, worked out by hand.

Each teacher's scores are standardised (zero mean, unit variance) and the teachers averaged. A dense student
compares cosines: its KL target is softmax(teacher) against softmax(similarity_scale x cosine), its MarginMSE
target the teacher's margins divided by the scale. A sparse student compares dot products, whose scale is its
own: the standardised scores are multiplied by the spread (standard deviation) of the student's own scores of the
round's pairs. The losses the pipeline builds are checked against those formulas on a hand-made batch, and real runs
against teachers scored here independently: bm25 with bm25s, a cross-encoder with its own `predict`.
"""

import json

import numpy as np
import pytest
import torch
from sentence_transformers import CrossEncoder
from sentence_transformers.sparse_encoder.losses import SpladeLoss
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from evaluation_helpers import brute_force_ndcg_at_10
from finetune_helpers import TINY_FINETUNE, bm25_scores, finetune, round_dir, round_examples, standardised, weights_checksum
from training.common.models import load_sentence_transformer, load_sparse_encoder
from training.common.sparse_encoding import encode_sparse
from training.data.collection import load_collection
from training.evaluation.retrievers import sparse
from training.finetuning.arguments import FinetuningModelArguments, RecipeArguments
from training.finetuning.data import training_set_from_beir
from training.finetuning import teachers
from training.finetuning.families import DENSE, SPARSE
from training.finetuning.rounds import DEV_METRICS_FILE

SCALE = 10.0  # similarity_scale: not the default (20), so a constant in place of it shows


def softmax(scores: np.ndarray) -> np.ndarray:
    exponentials = np.exp(scores - scores.max(axis=1, keepdims=True))
    return exponentials / exponentials.sum(axis=1, keepdims=True)


def kl_divergence(target: np.ndarray, predicted: np.ndarray) -> float:
    """KL(target || predicted) of row distributions, averaged over the rows (the batch)."""
    return float((target * (np.log(target) - np.log(predicted))).sum(axis=1).mean())


def margin_mse(student: np.ndarray, teacher: np.ndarray) -> float:
    """Mean squared difference of the positive-minus-negative margins (column 0 is the positive)."""
    return float((((student[:, :1] - student[:, 1:]) - (teacher[:, :1] - teacher[:, 1:])) ** 2).mean())


def dot_products(query: np.ndarray, documents: list[np.ndarray]) -> np.ndarray:
    """(examples, documents) similarities of each example's query with its positive then negatives."""
    return np.stack([(query * document).sum(axis=1) for document in documents], axis=1)


def cosines(query: np.ndarray, documents: list[np.ndarray]) -> np.ndarray:
    def unit(vectors: np.ndarray) -> np.ndarray:
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    return dot_products(unit(query), [unit(document) for document in documents])


def on_own_scale(z: np.ndarray, own_scores: np.ndarray) -> np.ndarray:
    """Standardised teacher scores in a sparse student's units: times the spread of its own scores."""
    return z * own_scores.std()


# What each student must be taught, from its similarities and the standardised teacher scores z.
EXPECTED_LOSS = {
    ("dense", "kl"): lambda q, docs, z: kl_divergence(softmax(z), softmax(SCALE * cosines(q, docs))) / SCALE**2,
    ("dense", "margin_mse"): lambda q, docs, z: margin_mse(cosines(q, docs), z / SCALE),
    ("sparse", "kl"): lambda q, docs, z: kl_divergence(
        softmax(on_own_scale(z, dot_products(q, docs))), softmax(dot_products(q, docs))
    ),
    ("sparse", "margin_mse"): lambda q, docs, z: margin_mse(dot_products(q, docs), on_own_scale(z, dot_products(q, docs))),
}


@pytest.fixture(scope="module")
def students(tiny_seed_dir):
    return {"dense": load_sentence_transformer(str(tiny_seed_dir)), "sparse": load_sparse_encoder(str(tiny_seed_dir))}


@pytest.mark.parametrize("kind, distillation", list(EXPECTED_LOSS))
def test_distillation_loss_is_the_formula_on_a_hand_made_batch(students, kind, distillation):
    family = SPARSE if kind == "sparse" else DENSE
    recipe = RecipeArguments(negatives="bm25", teacher=["bm25"], distillation=distillation, similarity_scale=SCALE)
    loss = family.loss(students[kind], recipe, FinetuningModelArguments(sparse=family.sparse))
    generator = torch.Generator().manual_seed(0)
    # A query, its positive and two negatives per example; SPLADE vectors are non-negative.
    embeddings = [torch.randn(4, 16, generator=generator) for _ in range(4)]
    if family.sparse:
        embeddings = [vectors.relu() for vectors in embeddings]
    teacher = torch.from_numpy(standardised(torch.randn(4, 3, generator=generator).numpy())).float()
    query, *documents = (vectors.double().numpy() for vectors in embeddings)

    # What the pipeline stores as the `label` column, the student's own scores being those of this batch.
    labels = teacher * family.teacher_label_scale(recipe, lambda: dot_products(query, documents))
    if family.sparse:
        assert isinstance(loss, SpladeLoss)  # FLOPS regularisation around the ranking loss
        loss = loss.loss
    value = loss.compute_loss_from_embeddings(embeddings, labels)

    expected = EXPECTED_LOSS[kind, distillation](query, documents, teacher.double().numpy())
    assert value.item() == pytest.approx(expected, rel=1e-4)


@pytest.fixture(scope="module")
def cross_encoder_dir(minilm_dir, tmp_path_factory):
    """A real CrossEncoder: a randomly initialised 1-layer BertForSequenceClassification (one logit, large
    initial weights so its sigmoid scores spread) with the all-MiniLM-L6-v2 tokenizer, saved by CrossEncoder."""
    torch.manual_seed(0)
    raw = tmp_path_factory.mktemp("cross-encoder-raw")
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128, num_labels=1, initializer_range=0.5,
    )
    BertForSequenceClassification(config).save_pretrained(raw)
    tokenizer.save_pretrained(raw)
    folder = tmp_path_factory.mktemp("cross-encoder") / "ce"
    CrossEncoder(str(raw)).save(str(folder))
    return folder


def test_ensemble_labels_are_the_mean_of_each_teachers_standardised_scores(
    scifact_slice, tiny_seed_dir, cross_encoder_dir, tmp_path
):
    out = tmp_path / "distilled"
    assert finetune([
        "--model_name_or_path", tiny_seed_dir, "--data_dir", scifact_slice, "--output_dir", out, *TINY_FINETUNE,
        "--negatives", "bm25", "--negatives_per_query", "2", "--teacher", "bm25", cross_encoder_dir,
        "--distillation", "kl", "--similarity_scale", "20", "--max_steps", "2",
    ]) == 0
    examples = round_examples(out, 1)
    saved = np.asarray(json.loads((round_dir(out, 1) / "examples.json").read_text())["scores"])
    train = load_collection(str(scifact_slice), "train")
    pairs = [(train.queries[query_id], train.corpus[doc_id]) for query_id, positive, negatives in examples
             for doc_id in (positive, *negatives)]
    cross_encoder = CrossEncoder(str(cross_encoder_dir)).predict(pairs).reshape(saved.shape)

    by_teacher = [standardised(bm25_scores(train, examples)), standardised(cross_encoder)]
    assert np.abs(by_teacher[0] - by_teacher[1]).mean() > 0.5  # the two teachers disagree: each one shows
    # Dense labels live on the cosine scale: the standardised scores divided by the similarity scale.
    np.testing.assert_allclose(saved * 20, np.mean(by_teacher, axis=0), rtol=1e-4, atol=1e-4)
    card = (out / "README.md").read_text()
    assert f"bm25 + {cross_encoder_dir} (kl, scores standardised, averaged, times 1 / similarity_scale)" in card
    assert "DistillKLDivLoss" in card


@pytest.fixture(scope="module")
def sparse_distilled(scifact_slice, tiny_seed_dir, tmp_path_factory):
    """SPLADE distilled from bm25 with MarginMSE, its dev search run over blocks of 4 queries; returns the output
    folder, the training set and (weights checksum, task, texts) of every SPLADE encoding the run made."""
    out = tmp_path_factory.mktemp("sparse-distilled") / "splade"
    training_set = training_set_from_beir(str(scifact_slice), 0.3, None, seed=3)
    encodings = []

    def spy(model, texts, task, *args, **kwargs):
        encodings.append((weights_checksum(model), task, list(texts)))
        return encode_sparse(model, texts, task, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sparse, "SCORE_BLOCK_VALUES", 4 * len(training_set.corpus))
        for module in (sparse, teachers):
            patch.setattr(module, "encode_sparse", spy)
        assert finetune([
            "--model_name_or_path", tiny_seed_dir, "--data_dir", scifact_slice, "--output_dir", out, *TINY_FINETUNE,
            "--sparse", "--negatives", "bm25", "--teacher", "bm25", "--distillation", "margin_mse",
            "--dev_fraction", "0.3", "--max_steps", "3",
        ]) == 0
    return out, training_set, encodings


def test_sparse_student_is_taught_the_standardised_teacher_scores_on_its_own_scale(
    sparse_distilled, scifact_slice, tiny_seed_dir
):
    """Round 1's student is the start: its own scores of the round's pairs, computed here with sentence-transformers'
    encode_query / encode_document, set the labels' spread."""
    out, _, _ = sparse_distilled
    examples = round_examples(out, 1)
    saved = np.asarray(json.loads((round_dir(out, 1) / "examples.json").read_text())["scores"])
    train = load_collection(str(scifact_slice), "train")
    student = load_sparse_encoder(str(tiny_seed_dir), max_seq_length=64)  # as TINY_FINETUNE trains it
    dense = {"convert_to_tensor": True, "convert_to_sparse_tensor": False}
    queries = student.encode_query([train.queries[query_id] for query_id, _, _ in examples], **dense)
    documents_by_column = zip(*[[positive, *negatives] for _, positive, negatives in examples])
    own_scores = np.stack([
        (queries * student.encode_document([train.corpus[doc_id] for doc_id in column], **dense)).sum(dim=1).numpy()
        for column in documents_by_column
    ], axis=1)

    expected = on_own_scale(standardised(bm25_scores(train, examples)), own_scores)
    assert own_scores.std() > 2  # far from a standardised teacher's 1: a label left on the teacher's scale shows
    np.testing.assert_allclose(saved, expected, rtol=1e-4, atol=1e-4)
    assert "SpladeLoss(SparseMarginMSELoss)" in (out / "README.md").read_text()


def test_the_students_own_scores_read_its_documents_from_the_corpus_encoding_of_the_dev_evaluation(sparse_distilled):
    """The labels' spread needs the student's scores of the round's pairs: their documents' vectors come from the
    corpus encoding the dev evaluation made with the same weights, never from encoding those documents again."""
    _, training_set, encodings = sparse_distilled
    corpus = list(training_set.corpus.values())
    document_encodings = [(checksum, texts) for checksum, task, texts in encodings if task == "document"]

    assert [texts for _, texts in document_encodings] == [corpus] * len(document_encodings)
    # The start and the trained model: each encodes the corpus once.
    assert len({checksum for checksum, _ in document_encodings}) == len(document_encodings) == 2


def test_sparse_dev_metrics_searched_in_blocks_are_the_brute_force_figures(sparse_distilled):
    out, training_set, _ = sparse_distilled
    reported = json.loads((round_dir(out, 1) / DEV_METRICS_FILE).read_text())["dev_ndcg@10"]

    assert len(training_set.dev.queries) == 9  # three blocks of 4, 4 and 1
    round_model = load_sparse_encoder(str(round_dir(out, 1) / "model"))
    assert reported == pytest.approx(brute_force_ndcg_at_10(round_model, training_set.dev), abs=1e-9)
