"""A SPLADE teacher for distillation (`--teacher sparse:CHECKPOINT` or a SparseEncoder folder): it scores a
(query, document) pair by the dot product of the model's own query and document vectors."""

import numpy as np
import pytest

from training.common.errors import InputError
from training.common.models import load_sparse_encoder
from training.data.collection import load_collection
from training.finetuning.teachers import SparseTeacher, check_teacher_specs, load_teacher


def standardised(scores: np.ndarray) -> np.ndarray:
    return (scores - scores.mean()) / scores.std()


@pytest.fixture(scope="module")
def pairs(scifact_slice):
    """Each of 4 training queries with 4 documents (its positive first), so queries repeat as in distillation; the
    documents are abstracts' first 300 characters, so that sentence-transformers' reference stays quick."""
    train = load_collection(str(scifact_slice), "train")
    corpus_texts = [text[:300] for text in train.corpus.values()]
    queries, documents = [], []
    for number, (query_id, query) in enumerate(list(train.queries.items())[:4]):
        positive = train.corpus[next(iter(train.qrels[query_id]))][:300]
        for document in (positive, *corpus_texts[3 * number : 3 * number + 3]):
            queries.append(query)
            documents.append(document)
    return train.corpus, queries, documents


@pytest.mark.parametrize("form", ["sparse:checkpoint", "SparseEncoder folder"])
def test_a_sparse_teacher_gives_the_standardised_dot_products_of_the_models_own_vectors(
    form, pairs, splade_tiny_dir, tmp_path
):
    corpus, queries, documents = pairs
    model = load_sparse_encoder(str(splade_tiny_dir))
    spec = f"sparse:{splade_tiny_dir}"
    if form == "SparseEncoder folder":
        spec = str(tmp_path / "splade")
        model.save(spec)
    expected = model.similarity_pairwise(
        model.encode_query(queries, convert_to_sparse_tensor=False), model.encode_document(documents, convert_to_sparse_tensor=False)
    ).numpy()

    teacher = load_teacher([spec], corpus)

    assert [type(member) for member in teacher.teachers] == [SparseTeacher]
    np.testing.assert_allclose(teacher.score(queries, documents), standardised(expected), rtol=0, atol=1e-4)
    assert expected[0] > np.median(expected[:4])  # the first query's positive: the scores are a ranking, not noise


def test_a_checkpoint_says_whether_it_teaches_as_sparse_or_dense(splade_tiny_dir, minilm_dir):
    check_teacher_specs([f"sparse:{splade_tiny_dir}", f"dense:{splade_tiny_dir}", "bm25", str(minilm_dir)])
    with pytest.raises(InputError, match=f"--teacher sparse:{splade_tiny_dir} or --teacher dense:{splade_tiny_dir}"):
        check_teacher_specs([str(splade_tiny_dir)])
    with pytest.raises(InputError, match="holds a sentence-transformer model, which cannot score pairs as sparse"):
        check_teacher_specs([f"sparse:{minilm_dir}"])
