"""Metrics on a hand-built collection of three judged queries, worked out by hand below.

nDCG uses graded gains (trec_eval's ndcg_cut: gain = relevance, discount log2(rank + 1)); relevance 0 is judged
not relevant; a query with no relevant judgment and an unjudged query are not evaluated.
"""

from math import log2

import pytest

from evaluation_helpers import write_collection
from training.data.collection import load_collection
from training.evaluation.metrics import compute_metrics, per_query_metric

CORPUS = [{"_id": f"d{i}", "title": "", "text": f"document {i}"} for i in range(1, 7)]
QUERIES = [{"_id": f"q{i}", "text": f"query {i}"} for i in range(1, 6)]
GRADED = [
    ("q1", "d1", 2), ("q1", "d2", 1), ("q1", "d3", 0),
    ("q2", "d4", 1),
    ("q3", "d5", 3), ("q3", "d6", 1),
    ("q4", "d1", 0),  # judged, nothing relevant: no metric is defined for q4
]  # q5 is not judged at all
FILLERS = [f"x{i}" for i in range(200)]  # retrieved documents nobody judged
RUN = {
    "q1": dict.fromkeys(["d3", "d1", "d6", "d2"]),  # relevant at ranks 2 (grade 2) and 4 (grade 1)
    "q2": dict.fromkeys([*FILLERS[:10], "d4"]),  # the relevant document at rank 11: outside the top 10
    "q3": dict.fromkeys(["d6", *FILLERS[:148], "d5"]),  # grade 1 at rank 1, grade 3 at rank 150
    "q4": dict.fromkeys(["d1"]),
    "q5": dict.fromkeys(["d2"]),
}
RUN = {query: {doc: 1000.0 - rank for rank, doc in enumerate(docs)} for query, docs in RUN.items()}


def dcg(gains_by_rank: dict[int, int]) -> float:
    return sum(gain / log2(rank + 1) for rank, gain in gains_by_rank.items())


@pytest.fixture
def collection(tmp_path):
    return load_collection(str(write_collection(tmp_path, CORPUS, QUERIES, {"test": GRADED})), "test")


@pytest.fixture
def binary_collection(tmp_path):
    binary = [(query, doc, min(grade, 1)) for query, doc, grade in GRADED]
    return load_collection(str(write_collection(tmp_path, CORPUS, QUERIES, {"test": binary})), "test")


def test_only_queries_with_a_relevant_judgment_are_evaluated(collection):
    assert sorted(collection.queries) == ["q1", "q2", "q3"]
    assert collection.qrels["q1"] == {"d1": 2, "d2": 1, "d3": 0}


def test_graded_metrics_match_the_hand_computation(collection):
    ndcg_q1 = dcg({2: 2, 4: 1}) / dcg({1: 2, 2: 1})
    ndcg_q2 = 0.0
    ndcg_q3 = dcg({1: 1}) / dcg({1: 3, 2: 1})

    metrics = compute_metrics(collection.qrels, RUN)

    assert metrics["ndcg@10"] == pytest.approx((ndcg_q1 + ndcg_q2 + ndcg_q3) / 3)
    assert metrics["mrr@10"] == pytest.approx((1 / 2 + 0 + 1 / 1) / 3)
    assert metrics["recall@100"] == pytest.approx((2 / 2 + 1 / 1 + 1 / 2) / 3)
    assert metrics["recall@1000"] == pytest.approx(1.0)


def test_binary_relevance_gives_each_relevant_document_gain_one(binary_collection):
    ndcg_q1 = dcg({2: 1, 4: 1}) / dcg({1: 1, 2: 1})
    ndcg_q3 = dcg({1: 1}) / dcg({1: 1, 2: 1})

    metrics = compute_metrics(binary_collection.qrels, RUN)

    assert metrics["ndcg@10"] == pytest.approx((ndcg_q1 + 0.0 + ndcg_q3) / 3)
    assert metrics["mrr@10"] == pytest.approx(0.5)


def test_a_query_the_run_leaves_out_scores_zero(collection):
    without_q1 = {query: docs for query, docs in RUN.items() if query != "q1"}

    metrics = compute_metrics(collection.qrels, without_q1, ["mrr@10"])

    assert metrics == {"mrr@10": pytest.approx((0 + 0 + 1) / 3)}


def test_equal_scores_are_ranked_by_document_id_in_reverse_as_trec_eval_does(collection):
    tied = {"q1": {"d2": 1.0, "d9": 1.0}, "q2": {"d4": 1.0, "d0": 1.0}, "q3": {"d5": 0.5}}

    metrics = compute_metrics(collection.qrels, tied, ["mrr@10"])

    # q1: d9 before d2, so its relevant document is second; q2: d4 before d0, first; q3: first.
    assert metrics == {"mrr@10": pytest.approx((1 / 2 + 1 + 1) / 3)}


def test_each_query_gets_its_own_score_as_a_paired_comparison_needs(collection):
    per_query = per_query_metric(collection.qrels, RUN, "ndcg@10")

    assert per_query == {
        "q1": pytest.approx(dcg({2: 2, 4: 1}) / dcg({1: 2, 2: 1})),
        "q2": 0.0,  # its relevant document is at rank 11
        "q3": pytest.approx(dcg({1: 1}) / dcg({1: 3, 2: 1})),
    }
