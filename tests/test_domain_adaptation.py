"""`benchmarks/domain_adaptation.py`: label-free adaptation of all-MiniLM-L6-v2 with every objective, end to end at the
smoke budget on a slice of the PubMedQA collection, every model also scored on the pseudo-dev; then resumed with
few-shot rows of some arms added, reported from the work folder alone, and refused over another budget. Also the parts
it is built from: the PubMedQA collection and TSDAE's word deletion."""

import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from benchmarks.adaptation import checkpoint_every
from benchmarks.domain_adaptation import main as domain_adaptation
from benchmarks.pubmedqa_collection import build_pubmedqa_collection
from benchmarks.tsdae import delete_words
from finetune_helpers import serve_at
from pretrain_helpers import subprocess_env, weights
from training.common.errors import InputError
from training.finetuning.pseudo_queries import split_sentences

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCHMARK = REPO_ROOT / "benchmarks" / "domain_adaptation.py"

PRETRAINING_ARMS = (
    "mlm", "tsdae", "seed", "seed-warm-heads", "seed-anchored-10", "seed-anchored-100", "strong-decoder", "decoder-only",
    "decoder-only-anchored-10", "decoder-only-anchored-10-fast-decoder",
)
# Titles are skipped: the PubMedQA collection's abstracts have none.
PSEUDO_LABEL_ARMS = (
    "pseudo-labels-sentences", "pseudo-labels-crops", "pseudo-labels-sentences-sparse-teacher",
    "pseudo-labels-sentences-own-negatives", "pseudo-labels-sentences-4-negatives", "pseudo-labels-leads-4-negatives",
    "seed-then-pseudo-labels",
    "seed-or-start-then-pseudo-labels", "seed-anchored-10-then-pseudo-labels",
)
ADAPTING_ARMS = (*PRETRAINING_ARMS, *PSEUDO_LABEL_ARMS)
SMOKE_STEPS, SMOKE_BATCH, SMOKE_LENGTH = 2, 4, 32  # the smoke budget's
# The start is all-MiniLM-L6-v2 served at 64 tokens, not its 256: every model is judged and published at the start's
# length, and at 64 the 42 evaluations of 24 abstracts cost a quarter as much. Still twice the training length, so a
# run that publishes what it trained at is told apart from one that keeps the start's.
START_LENGTH = 64


def run_benchmark(argv: list) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCHMARK), *map(str, argv)], cwd=REPO_ROOT,
        env=subprocess_env(PYTHONPATH=str(REPO_ROOT)), capture_output=True, text=True, timeout=1200,
    )


def pairs_file(folder: Path, count: int, shared_data_dir: Path | None = None) -> Path:
    """The first `count` real PubMedQA pairs, or made-up ones without the shared data."""
    path = folder / "pairs.jsonl"
    if shared_data_dir is not None:
        lines = (shared_data_dir / "pubmedqa" / "pairs.jsonl").read_text().splitlines()[:count]
    else:
        lines = [json.dumps({"pmid": str(1000 + n), "query": f"question {n}?", "positive": f"abstract {n}."}) for n in range(count)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_pubmedqa_collection_judges_each_question_by_its_own_abstract_on_a_fixed_half_split(tmp_path):
    pairs = pairs_file(tmp_path, 10)
    folder = build_pubmedqa_collection(pairs, tmp_path / "pubmedqa")
    corpus = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
    queries = {json.loads(line)["_id"]: json.loads(line)["text"] for line in (folder / "queries.jsonl").read_text().splitlines()}
    qrels = {split: (folder / "qrels" / f"{split}.tsv").read_text().splitlines()[1:] for split in ("test", "train")}

    assert len(corpus) == 10 and len(qrels["test"]) == 5 and len(qrels["train"]) == 5
    for line in qrels["test"] + qrels["train"]:
        query_id, document_id, score = line.split("\t")
        assert query_id == f"q{document_id}" and score == "1"
        assert queries[query_id] == f"question {int(document_id) - 1000}?"
    # The split is the collection's, whatever the file's order.
    shuffled = pairs.read_text().splitlines()
    random.Random(5).shuffle(shuffled)
    (tmp_path / "shuffled").mkdir()
    (tmp_path / "shuffled" / "pairs.jsonl").write_text("\n".join(shuffled) + "\n")
    again = build_pubmedqa_collection(tmp_path / "shuffled" / "pairs.jsonl", tmp_path / "again")
    assert (again / "qrels" / "test.tsv").read_text() == (folder / "qrels" / "test.tsv").read_text()


def test_pubmedqa_collection_refuses_a_bad_line_naming_it_and_leaves_nothing(tmp_path):
    pairs = pairs_file(tmp_path, 4)
    pairs.write_text(pairs.read_text() + json.dumps({"pmid": "9", "query": "", "positive": "text"}) + "\n")

    with pytest.raises(InputError, match=r"line 5: query empty or not text"):
        build_pubmedqa_collection(pairs, tmp_path / "pubmedqa")
    assert not (tmp_path / "pubmedqa").exists()


def test_an_arms_run_is_resumable_from_half_way_and_a_run_of_a_few_steps_saves_at_its_end_alone():
    assert [checkpoint_every(steps) for steps in (1000, 64, 10)] == [500, 32, 5]  # the gpu and cpu budgets; the fewest
    assert [checkpoint_every(steps) for steps in (9, 2, 1)] == [9, 2, 1]  # the smoke budget's 2, and fine-tuning's 1


def test_tsdae_deletes_each_word_with_probability_0_6_the_same_for_the_same_seed():
    text = " ".join(f"w{n}" for n in range(20000))
    damaged = delete_words(text, random.Random(1))

    assert 0.38 < len(damaged.split()) / 20000 < 0.42
    assert damaged == delete_words(text, random.Random(1)) != delete_words(text, random.Random(2))
    assert set(damaged.split()) <= set(text.split())
    assert delete_words("one", random.Random(0), probability=0.999999) == "one"  # never empty


@pytest.fixture(scope="module")
def start_dir(minilm_dir, tmp_path_factory) -> Path:
    """all-MiniLM-L6-v2 whose sentence_bert_config.json serves it at START_LENGTH tokens."""
    folder = tmp_path_factory.mktemp("start") / "minilm"
    shutil.copytree(minilm_dir, folder)
    serve_at(folder, START_LENGTH)
    return folder


@pytest.fixture(scope="module")
def adaptation_run(shared_data_dir, start_dir, splade_tiny_dir, tmp_path_factory):
    """The smoke benchmark on 24 PubMedQA pairs, splade-tiny given as the SPLADE teacher: zero-shot only, then resumed
    with few-shot k=4 for SEED then pseudo-labels (and what it needs), then its tables printed from the work folder
    alone, then over the cpu budget."""
    folder = tmp_path_factory.mktemp("domain-adaptation")
    pairs = pairs_file(folder, 24, shared_data_dir)
    argv = [
        "--pubmedqa_pairs", pairs, "--start", start_dir, "--sparse_teacher", splade_tiny_dir,
        "--budget", "smoke", "--work_dir", folder / "work",
    ]
    first = run_benchmark([*argv, "--few_shot", "--output_json", folder / "zero-shot.json"])
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    results_after_first = (folder / "work" / "results.json").read_text()
    second = run_benchmark([
        *argv, "--few_shot", "4", "--arms", "seed-then-pseudo-labels", "--output_json", folder / "few-shot.json",
    ])
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    results_after_second = (folder / "work" / "results.json").read_text()
    report = run_benchmark([*argv, "--few_shot", "4", "--report_only", "--output_json", folder / "report.json"])
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-3000:]
    other_budget = run_benchmark([*argv[:-4], "--budget", "cpu", "--work_dir", folder / "work"])
    return SimpleNamespace(
        work=folder / "work", first=first, second=second, report=report, other_budget=other_budget,
        results_after_first=json.loads(results_after_first), results_after_second=json.loads(results_after_second),
        results_at_the_end=json.loads((folder / "work" / "results.json").read_text()),
        zero_shot=json.loads((folder / "zero-shot.json").read_text()), few_shot=json.loads((folder / "few-shot.json").read_text()),
        reported=json.loads((folder / "report.json").read_text()),
    )


def test_every_arm_is_adapted_and_evaluated_zero_shot_and_on_the_pseudo_dev(adaptation_run):
    rows = adaptation_run.zero_shot["tables"]["pubmedqa"]["arms"]

    assert [row["key"] for row in rows] == ["start", "rrf", *ADAPTING_ARMS]
    assert "pseudo-label distillation, titles as pseudo-queries: skipped, its corpus has no titles" in adaptation_run.first.stdout
    for row in rows:
        assert 0 <= row["summary"]["zero-shot ndcg@10"]["mean"] <= 1
        assert 0 <= row["summary"]["pseudo-dev ndcg@10"]["mean"] <= 1
        assert row["summary"]["published ndcg@10"]["seeds"] == 1
        cosine = row["summary"]["mean pairwise cosine"]["mean"]
        assert cosine is None if row["key"] == "rrf" else -1 <= cosine <= 1
        seconds = row["summary"]["adaptation seconds"]["mean"]
        assert (seconds is None) == (row["key"] in ("start", "rrf"))


@pytest.mark.parametrize("arm", ADAPTING_ARMS)
def test_every_arm_sees_the_same_texts_and_keeps_the_starts_pooling(adaptation_run, start_dir, arm):
    from training.common.models import load_sentence_transformer

    adapted = adaptation_run.work / "pubmedqa" / arm / "seed-1" / "adapted"
    trained = adapted / "finetuning" / "round-1" if arm in PSEUDO_LABEL_ARMS else adapted
    runs = [adapted.parent / "heads", trained] if arm == "seed-warm-heads" else [trained]  # its two halves
    states = [json.loads((run / "trainer_state.json").read_text()) for run in runs]
    model = load_sentence_transformer(str(trained / "model" if arm in PSEUDO_LABEL_ARMS else adapted))

    assert sum(state["global_step"] for state in states) == SMOKE_STEPS
    assert {state["train_batch_size"] for state in states} == {SMOKE_BATCH}
    if arm != "tsdae":  # which saves no checkpoint: an interrupted TSDAE run is run again
        # a run of a step or two (the warm-heads arm's halves: one each) saves a checkpoint at its end alone
        assert all(state["save_steps"] == state["global_step"] for state in states)
    assert [type(module).__name__ for module in model] == ["Transformer", "Pooling", "Normalize"]
    assert model[1].get_config_dict()["pooling_mode"] == "mean"
    # A continued pre-training keeps the start's length; a pseudo-label run trains at SMOKE_LENGTH and saves its round
    # at the start's, the length it was judged at and is published at.
    assert model.max_seq_length == START_LENGTH


def test_the_pseudo_dev_is_the_held_out_split_of_the_sentences_run(adaptation_run):
    steps = adaptation_run.results_after_first
    run = steps["pubmedqa/pseudo-labels-sentences/seed-1/adaptation"]

    # Same queries, same corpus, same models at the same length: the benchmark's pseudo-dev scores are the run's own.
    assert run["own_pseudo_dev_start"] == pytest.approx(steps["pubmedqa/start/seed-1/pseudo-dev"]["ndcg@10"])
    assert run["own_pseudo_dev_round"] == pytest.approx(steps["pubmedqa/pseudo-labels-sentences/seed-1/pseudo-dev"]["ndcg@10"])
    start_per_query = steps["pubmedqa/start/seed-1/pseudo-dev"]["per_query_ndcg@10"]  # what the guard resamples
    assert sum(start_per_query.values()) / len(start_per_query) == pytest.approx(run["own_pseudo_dev_start"])
    assert run["kept_start"] or run["own_pseudo_dev_round"] > run["own_pseudo_dev_start"]  # never a round no better
    examples = adaptation_run.work / "pubmedqa" / "pseudo-labels-sentences" / "seed-1" / "adapted" / "finetuning" / "round-1"
    scores = json.loads((examples / "examples.json").read_text())["scores"]
    assert run["teacher_prefers_source"] == pytest.approx(sum(positive > negative for positive, negative in scores) / len(scores))


@pytest.mark.parametrize(
    ("arm", "first_step"), [("seed-then-pseudo-labels", "seed"), ("seed-anchored-10-then-pseudo-labels", "seed-anchored-10")]
)
def test_seed_then_pseudo_labels_continues_seeds_model_taught_by_bm25_and_the_start(
    adaptation_run, start_dir, arm, first_step
):
    folder = adaptation_run.work / "pubmedqa" / arm / "seed-1" / "adapted"
    run = json.loads((folder / "finetuning" / "run.json").read_text())

    assert run["model"]["model_name_or_path"] == str(adaptation_run.work / "pubmedqa" / first_step / "seed-1" / "adapted")
    assert not run["model"].get("candidate_starts")  # unguarded: the pseudo-dev does not drop the first step
    assert run["recipe"]["teacher"] == ["bm25", str(start_dir)]
    assert run["data"]["pseudo_queries"] == ["sentences"]


def test_the_sparse_teacher_arm_adds_the_given_splade_model_to_bm25_and_the_start(
    adaptation_run, start_dir, splade_tiny_dir
):
    folder = adaptation_run.work / "pubmedqa" / "pseudo-labels-sentences-sparse-teacher" / "seed-1" / "adapted"
    run = json.loads((folder / "finetuning" / "run.json").read_text())
    result = adaptation_run.results_after_first["pubmedqa/pseudo-labels-sentences-sparse-teacher/seed-1/adaptation"]

    assert run["recipe"]["teacher"] == ["bm25", str(start_dir), f"sparse:{splade_tiny_dir}"]
    assert run["data"]["pseudo_queries"] == ["sentences"]
    assert 0 <= result["teacher_prefers_source"] <= 1


def test_the_own_negatives_arm_alone_mines_the_starts_index_the_four_negatives_arms_alone_four_every_other_one_bm25(
    adaptation_run,
):
    for arm in PSEUDO_LABEL_ARMS:
        round_one = adaptation_run.work / "pubmedqa" / arm / "seed-1" / "adapted" / "finetuning" / "round-1"
        recipe = json.loads((round_one.parent / "run.json").read_text())["recipe"]
        examples = json.loads((round_one / "examples.json").read_text())

        assert recipe["negatives"] == ("model" if arm == "pseudo-labels-sentences-own-negatives" else "bm25"), arm
        width = 1 + (4 if arm.endswith("-4-negatives") else 1)
        assert {len(negatives) for *_, negatives in examples["examples"]} == {width - 1}, arm
        assert {len(scores) for scores in examples["scores"]} == {width}, arm


def test_the_leads_arm_trains_on_each_passages_first_sentence_and_judges_its_rounds_on_sentences(adaptation_run):
    adapted = adaptation_run.work / "pubmedqa" / "pseudo-labels-leads-4-negatives" / "seed-1" / "adapted"
    run = json.loads((adapted / "finetuning" / "run.json").read_text())
    [data_line] = [line for line in (adapted / "README.md").read_text().splitlines() if line.startswith("- **Data**")]
    corpus = (adaptation_run.work / "collections" / "pubmedqa" / "corpus.jsonl").read_text().splitlines()
    passages_with_a_lead = sum(len(split_sentences(json.loads(line)["text"])) >= 2 for line in corpus)

    assert run["data"]["pseudo_queries"] == ["leads"] and run["data"]["dev_pseudo_queries"] == ["sentences"]
    # the card's count of each kind made: every passage with two sentences or more made its first one a query
    made = f"one pseudo-query a passage ({passages_with_a_lead} leads): a passage's first sentence as the query"
    assert made in data_line


def test_a_sparse_teacher_that_is_no_splade_model_is_refused_before_any_step(minilm_dir, tmp_path, capsys):
    """In this process: the runs above check the script's exit statuses as a user gets them."""
    status = domain_adaptation([
        "--data_dir", str(tmp_path / "never-read"), "--start", str(minilm_dir), "--sparse_teacher", str(minilm_dir),
        "--budget", "smoke", "--work_dir", str(tmp_path / "work"),
    ])
    error = capsys.readouterr().err

    assert status == 2
    assert f"--sparse_teacher {minilm_dir}" in error and "cannot score pairs as sparse" in error
    assert not (tmp_path / "work").exists()


def test_seed_or_start_then_pseudo_labels_trains_whichever_scores_higher_on_the_pseudo_dev(adaptation_run, start_dir):
    arm = adaptation_run.work / "pubmedqa" / "seed-or-start-then-pseudo-labels" / "seed-1" / "adapted"
    run = json.loads((arm / "finetuning" / "run.json").read_text())
    steps = adaptation_run.results_after_first
    seed, start = (steps[f"pubmedqa/{key}/seed-1/pseudo-dev"]["ndcg@10"] for key in ("seed", "start"))
    result = steps["pubmedqa/seed-or-start-then-pseudo-labels/seed-1/adaptation"]

    assert run["model"]["model_name_or_path"] == str(adaptation_run.work / "pubmedqa" / "seed" / "seed-1" / "adapted")
    assert run["model"]["candidate_starts"] == [str(start_dir)]
    # The start the run trained and compared its round with is the better of the two on the pseudo-dev (SEED's on a tie).
    assert result["own_pseudo_dev_start"] == pytest.approx(max(seed, start))
    assert result["trained_the_given_start"] == (seed >= start)


def test_the_decoder_arms_train_what_they_say(adaptation_run):
    from modeling_seed import SeedEncoderConfig

    def config(arm: str) -> SeedEncoderConfig:
        return SeedEncoderConfig.from_pretrained(adaptation_run.work / "pubmedqa" / arm / "seed-1" / "adapted")

    seed, strong, alone, mlm = config("seed"), config("strong-decoder"), config("decoder-only"), config("mlm")
    assert (seed.decoder_condition, seed.decoder_attention_span, seed.decoder_num_layers, seed.mlm_loss_weight) == ("mean", 2, 3, 1)
    assert (strong.decoder_condition, strong.decoder_attention_span) == ("mean", None)
    assert (alone.decoder_condition, alone.decoder_attention_span, alone.mlm_loss_weight) == ("mean", 2, 0)
    assert mlm.decoder_loss_weight == 0
    steps = adaptation_run.results_after_first
    assert steps["pubmedqa/seed/seed-1/adaptation"]["cls_information"] is not None
    assert steps["pubmedqa/mlm/seed-1/adaptation"]["cls_information"] is None
    assert steps["pubmedqa/decoder-only/seed-1/adaptation"]["mlm_loss"] is None


def test_the_warm_heads_arm_trains_seeds_heads_on_the_frozen_start_then_everything_from_there(adaptation_run, start_dir):
    from transformers import BertModel

    from modeling_seed import SeedEncoderConfig

    folder = adaptation_run.work / "pubmedqa" / "seed-warm-heads" / "seed-1"
    start = BertModel.from_pretrained(start_dir).state_dict()
    heads = weights(folder / "heads")
    encoder = [name for name in heads if name.startswith("bert.")]
    config = SeedEncoderConfig.from_pretrained(folder / "adapted")
    result = adaptation_run.results_after_first["pubmedqa/seed-warm-heads/seed-1/adaptation"]

    assert encoder and all(torch.equal(heads[name], start[name.removeprefix("bert.")]) for name in encoder)
    assert "Encoder frozen (`--freeze_encoder`)" in (folder / "heads" / "README.md").read_text()
    # The second half continues the first's heads and trains everything (at the smoke budget its one step is the
    # warm-up's, at rate 0, so the weights are compared in the card rather than in the numbers).
    card = (folder / "adapted" / "README.md").read_text()
    assert f"continuing the SEED checkpoint `{folder / 'heads'}`" in card and "Encoder frozen" not in card
    assert (config.decoder_condition, config.decoder_attention_span, config.decoder_num_layers) == ("mean", 2, 3)
    assert result["frozen_decoder_loss"] is not None and result["decoder_loss"] is not None


@pytest.mark.parametrize(
    ("arm", "weight", "with_mlm", "decoder_rate"),
    [
        ("seed-anchored-10", 10, True, 3e-4), ("seed-anchored-100", 100, True, 3e-4),
        ("decoder-only-anchored-10", 10, False, 3e-4), ("decoder-only-anchored-10-fast-decoder", 10, False, 3e-3),
    ],
)
def test_the_anchored_arms_are_held_near_the_start_at_their_weight(adaptation_run, arm, weight, with_mlm, decoder_rate):
    from modeling_seed import SeedEncoderConfig

    folder = adaptation_run.work / "pubmedqa" / arm / "seed-1" / "adapted"
    config = SeedEncoderConfig.from_pretrained(folder)
    result = adaptation_run.results_after_first[f"pubmedqa/{arm}/seed-1/adaptation"]
    arguments = torch.load(folder / "training_args.bin", weights_only=False)

    assert f"Held near its start (`--anchor_loss_weight {weight:.1f}`)" in (folder / "README.md").read_text()
    assert (arguments.learning_rate, arguments.decoder_learning_rate) == pytest.approx((3e-5, decoder_rate))
    assert (config.decoder_condition, config.decoder_attention_span, config.decoder_num_layers) == ("mean", 2, 3)
    assert config.mlm_loss_weight == int(with_mlm) and (result["mlm_loss"] is not None) == with_mlm
    assert 0 < result["anchor_loss"] < 1
    assert adaptation_run.results_after_first["pubmedqa/seed/seed-1/adaptation"]["anchor_loss"] is None


def test_a_rerun_resumes_adding_the_few_shot_rows_of_the_arms_asked_for_without_redoing_a_step(adaptation_run):
    before, after = adaptation_run.results_after_first, adaptation_run.results_after_second

    assert all(after[key] == value for key, value in before.items())
    added = sorted(set(after) - set(before))
    # SEED then pseudo-labels brings the start (the published model is measured against it) and SEED (its student).
    assert added == sorted(f"pubmedqa/{arm}/seed-1/k=4" for arm in ("start", "seed", "seed-then-pseudo-labels"))
    ran = [line for line in adaptation_run.second.stdout.splitlines() if re.match(r"\[pubmedqa/.*\] running", line)]
    assert ran and all(line.split("]")[0].endswith("k=4") for line in ran)
    for row in adaptation_run.few_shot["tables"]["pubmedqa"]["arms"]:
        assert 0 <= row["summary"]["k=4 ndcg@10"]["mean"] <= 1


def test_report_only_prints_every_table_the_work_folder_holds_and_runs_nothing(adaptation_run):
    reported = adaptation_run.reported["tables"]["pubmedqa"]
    few_shot = {row["key"]: row["summary"]["k=4 ndcg@10"]["seeds"] for row in reported["arms"]}

    assert not re.search(r"\] running", adaptation_run.report.stdout)
    assert [row["key"] for row in reported["arms"]] == ["start", "rrf", *ADAPTING_ARMS]
    assert few_shot == {key: int(key in ("start", "seed", "seed-then-pseudo-labels")) for key in few_shot}
    assert reported["proxy_agreement"]["per_seed"][0]["models"] == len(few_shot)
    # Every pseudo-dev step keeps its queries' nDCG@10, so what is published is decided as fine-tuning's guard does.
    assert reported["proxy_agreement"]["per_seed"][0]["decision_rules"] == ["paired bootstrap"]


def test_a_changed_budget_is_refused_in_its_work_folder_and_changes_nothing(adaptation_run):
    assert adaptation_run.other_budget.returncode == 2
    assert "holds a benchmark made with other settings (budget differ)" in adaptation_run.other_budget.stderr
    assert adaptation_run.results_at_the_end == adaptation_run.results_after_second


def test_the_claims_compare_per_seed_differences(adaptation_run):
    claims = {item["claim"]: item for item in adaptation_run.reported["tables"]["pubmedqa"]["claims"]}
    steps = adaptation_run.results_after_second

    def difference(better: str, worse: str, step: str) -> float:
        return steps[f"pubmedqa/{better}/seed-1/{step}"]["ndcg@10"] - steps[f"pubmedqa/{worse}/seed-1/{step}"]["ndcg@10"]

    assert claims["SEED > TSDAE"]["differences"] == [pytest.approx(difference("seed", "tsdae", "zero-shot"))]
    assert claims["SEED then pseudo-labels > pseudo-labels (sentences) alone"]["differences"] == [
        pytest.approx(difference("seed-then-pseudo-labels", "pseudo-labels-sentences", "zero-shot"))
    ]
    few_shot = claims["SEED then k=4 > the start then k=4"]["differences"]
    assert few_shot == [pytest.approx(difference("seed", "start", "k=4"))]
