"""Label-free domain adaptation as steps: continue a trained Siamese encoder on a collection's corpus alone with each
arm's objective (the arms are `adaptation_arms.py`'s), then evaluate it zero-shot, on a pseudo-dev and after few-shot
fine-tuning; the start itself, unadapted, and the zero-shot RRF of BM25 and the start are rows too.

The pseudo-dev of a collection and seed is the dev split `training/finetune.py --corpus_file <corpus> --pseudo_queries
sentences --seed <seed>` holds out (10% of the passages, one sentence of each as its query, cut from the passage it
must find 90% of the time): the pseudo-label arm with sentences selects its model on exactly these queries and never
trains on them. Every model is scored on it at the training length, as fine-tuning scores its dev split. What the
recipe publishes is the trained model where its pseudo-dev nDCG@10 beats the start's, else the start (a fine-tuning
run has already kept its own start when no round beat it on its own pseudo-dev).

Every arm sees the same texts budget (steps x batch, the same tokens), learning rate, schedule and seed; the decoder
arms' decoder reads the vector the start retrieves with (its pooling: the mean for all-MiniLM-L6-v2). Every model is
evaluated as the start is used: a SentenceTransformer with the start's pooling, normalisation and max_seq_length.
Nothing is chosen on the evaluation split. The steps run the package's own code (`training/pretrain.py` and
`training/finetune.py` through their `main`, the evaluation package) and sentence-transformers' TSDAE loss; each
finished step's result is kept (harness.ResultStore) and the pipelines resume their own folders.

The work folder:

    settings.json                          what defines every step; a rerun with another budget is refused
    results.json                           the finished steps' results, by step
    collections/pubmedqa/                  the PubMedQA collection, when --pubmedqa_pairs builds it
    <collection>/<arm>/seed-<S>/adapted/   the arm's adapted model (pretraining folder, TSDAE's SentenceTransformer, or
                                           the pseudo-label run's folder, its trained round in finetuning/round-1/model)
    <collection>/<arm>/seed-<S>/heads/     the warm-heads arm's first half: the new heads trained on the frozen start
    <collection>/<arm>/seed-<S>/k<K>/      fine-tuned on K training queries drawn with seed S (start/seed-<S>/k<K> too)
    embedding-cache/                       corpus embeddings of the evaluated models, keyed by their weights
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from benchmarks.adaptation_arms import BY_KEY, START, AdaptationArm
from benchmarks.harness import ResultStore, dense_retriever, precision_flags, recipe, run_script
from training import finetune, pretrain
from training.data.corpus import check_train_files
from training.data.collection import Collection, load_collection
from training.evaluation.evaluate import evaluate_retriever
from training.evaluation.metrics import per_query_metric
from training.evaluation.retrievers import BM25Retriever, HybridRetriever
from training.finetuning.arguments import FinetuningDataArguments
from training.finetuning.data import load_training_set, titled_passages
from training.finetuning.pseudo_queries import SENTENCES, TITLES
from training.finetuning.run_folder import FinetuningRun
from training.pretraining.arguments import WARM_START_DECODER_LR_FACTOR
from benchmarks.tsdae import train_tsdae

METRICS = ("ndcg@10", "recall@100")
ZERO_SHOT = "zero-shot"
ADAPTATION = "adaptation"
PSEUDO_DEV = "pseudo-dev"
# A pseudo-dev step's nDCG@10 of each query, which the keep-or-publish rule resamples.
PER_QUERY = f"per_query_{METRICS[0]}"
PRETRAINING_METRICS = ("cls_information", "mlm_loss", "decoder_loss", "anchor_loss")
# The pseudo-queries of the pseudo-dev every model is scored on: the Inverse Cloze Task's sentences, the most
# query-like of the kinds a corpus alone gives.
PSEUDO_DEV_KIND = SENTENCES
# Every pseudo-label arm runs the label-free recipe users run (recipes/finetune_label_free.yaml: one round, the
# teacher's margins on the student's own scale), with the arm's pseudo-queries, teacher and negatives and the budget's
# steps over it. The teacher: BM25 and the start itself, frozen (GPL's recipe without a query generator or a
# cross-encoder, none of which installs offline), each standardised; negatives mined by the arm's source (BM25, one a
# pseudo-query, unless it says otherwise).
LABEL_FREE_RECIPE = "finetune_label_free"


@dataclass(frozen=True)
class AdaptationBudget:
    """How much every step does; the same for every arm and collection."""

    description: str
    seeds: tuple[int, ...]
    few_shot: tuple[int, ...]  # training queries of each few-shot fine-tuning
    steps: int  # adaptation steps of `batch_size` texts: every arm sees steps x batch_size texts
    batch_size: int
    max_seq_length: int  # tokens of a training text in adaptation and fine-tuning (evaluation: the start's own)
    learning_rate: float  # the encoder's peak rate in every arm (a decoder of its own trains at 10x, the warm default)
    warmup_steps: float  # a fraction of the steps: linear warm-up, then linear decay to 0, in every arm
    validation_percentage: float  # of the corpus, held out of pre-training to measure cls_information on
    pretraining_evaluations: int
    finetuning_steps: int
    finetuning_batch_size: int
    finetuning_learning_rate: float
    finetuning_recipe: tuple[str, ...]


BUDGETS = {
    "smoke": AdaptationBudget(
        description="a pipeline check in seconds; the numbers mean nothing",
        seeds=(1,), few_shot=(8,), steps=2, batch_size=4, max_seq_length=32, learning_rate=3e-5, warmup_steps=0.06,
        validation_percentage=10, pretraining_evaluations=1, finetuning_steps=1, finetuning_batch_size=4,
        finetuning_learning_rate=2e-5, finetuning_recipe=("--negatives", "bm25"),
    ),
    # 1,024 texts an arm at 128 tokens, the encoder at TSDAE's paper rate (3e-5). Measured for all-MiniLM-L6-v2 on 2
    # cores, batch 16 x 128 tokens: an MLM step 1.3 s, a SEED or strong-decoder step 3.0-3.2 s; encoding SciFact's
    # corpus at the start's 256 tokens ~210 s a model.
    "cpu": AdaptationBudget(
        description="hours on 2 CPU cores (resumable): 64 steps x 16 texts an arm, 2 seeds, few-shot k=64",
        seeds=(1, 2), few_shot=(64,), steps=64, batch_size=16, max_seq_length=128, learning_rate=3e-5,
        warmup_steps=0.06, validation_percentage=2, pretraining_evaluations=2, finetuning_steps=50,
        finetuning_batch_size=16, finetuning_learning_rate=2e-5, finetuning_recipe=("--negatives", "bm25"),
    ),
    # Measured on one H200 (bf16): a pseudo-label arm ~4 min a collection and seed (1,000 steps at ~5 a second).
    "gpu": AdaptationBudget(
        description="hours on one recent GPU (resumable): 1,000 steps x 64 texts an arm, 3 seeds",
        seeds=(1, 2, 3), few_shot=(64,), steps=1000, batch_size=64, max_seq_length=256, learning_rate=3e-5,
        warmup_steps=0.06, validation_percentage=2, pretraining_evaluations=4, finetuning_steps=200,
        finetuning_batch_size=32, finetuning_learning_rate=2e-5, finetuning_recipe=("--negatives", "bm25"),
    ),
}


def checkpoint_every(steps: int) -> int:
    """`--save_steps` of every arm's run of `steps` steps: a checkpoint half-way, so an interrupted run resumes, and no
    more (fine-tuning's default, every 50 steps, saved one every 10 seconds on a GPU at the gpu budget). A run of
    fewer than 10 steps (the smoke budget's 2) saves at its end alone: redoing a step costs less than writing a
    checkpoint half-way (all-MiniLM-L6-v2 with the weak decoder and its optimizer state: 335 MB, which the smoke
    benchmark wrote 19 times)."""
    return steps // 2 if steps >= 10 else steps


def few_shot_label(k: int) -> str:
    return f"k={k}"


class Adaptation:
    """The steps of the benchmark on one collection, in a work folder shared by every collection."""

    def __init__(
        self, work_dir: Path, name: str, data_dir: Path, split: str, start: Path, budget: AdaptationBudget,
        sparse_teacher: Path | None = None,
    ):
        self.work = Path(work_dir)
        self.name = name
        self.data_dir = Path(data_dir)
        self.start = Path(start)
        self.budget = budget
        self.sparse_teacher = sparse_teacher
        self.corpus_file = str(self.data_dir / "corpus.jsonl")
        check_train_files([self.corpus_file], "text", argument="--data_dir")
        self.test = load_collection(str(self.data_dir), split)
        self.has_titles = any(title and title.strip() for title in titled_passages([self.corpus_file], "text", "title")[1])
        # Every model is evaluated at the length the start is used at (fine-tuned folders say the training length).
        self.start_length = json.loads((self.start / "sentence_bert_config.json").read_text())["max_seq_length"]
        self.precision = precision_flags()
        self.cache_dir = self.work / "embedding-cache"
        self.store: ResultStore | None = None
        self._pseudo_devs: dict[int, Collection] = {}

    def attach(self, store: ResultStore) -> None:
        self.store = store

    def skipped_because(self, arm: AdaptationArm) -> str | None:
        """Why the collection cannot run `arm` (title pseudo-queries need a corpus with titles, a SPLADE teacher needs
        --sparse_teacher), or None when it can."""
        if TITLES in arm.pseudo_queries and not self.has_titles:
            return "its corpus has no titles"
        if arm.sparse_teacher and self.sparse_teacher is None:
            return "no --sparse_teacher given"
        return None

    def allows(self, arm: AdaptationArm) -> bool:
        return self.skipped_because(arm) is None

    def folder(self, arm: AdaptationArm, seed: int) -> Path:
        return self.work / self.name / arm.key / f"seed-{seed}"

    def model_dir(self, arm: AdaptationArm, seed: int) -> Path:
        """The arm's trained model (a pseudo-label run's round, whether or not the run published it over its start)."""
        if arm.distils:
            return FinetuningRun(self.folder(arm, seed) / "adapted").round(1).model_dir
        return self.folder(arm, seed) / "adapted" if arm.adapts else self.start

    def key(self, arm: AdaptationArm, seed: int | None, step: str) -> str:
        return "/".join([self.name, arm.key, *([] if seed is None else [f"seed-{seed}"]), step])

    def adapt(self, arm: AdaptationArm, seed: int) -> dict:
        """Continue the start on the corpus with the arm's objective; its losses and wall time."""
        output = self.folder(arm, seed) / "adapted"
        budget = self.budget

        def step() -> dict:
            if arm.tsdae:
                train_tsdae(
                    self.start, [self.corpus_file], output, seed=seed, max_steps=budget.steps,
                    batch_size=budget.batch_size, learning_rate=budget.learning_rate,
                    max_seq_length=budget.max_seq_length, warmup_steps=budget.warmup_steps, weight_decay=0.01,
                    precision=self.precision,
                )
                return tsdae_metrics(output)
            if arm.distils:
                return self.distil(arm, seed, output)
            if not arm.warm_heads:
                self.pretrain(self.start, arm.pretraining_flags, output, seed, budget.steps)
                return pretraining_metrics(output)
            heads = self.folder(arm, seed) / "heads"
            warm_rate = budget.learning_rate * WARM_START_DECODER_LR_FACTOR  # every weight trained there is new
            self.pretrain(self.start, (
                *arm.pretraining_flags, "--freeze_encoder", "--learning_rate", warm_rate, "--decoder_learning_rate", warm_rate,
            ), heads, seed, budget.steps // 2)
            self.pretrain(heads, (), output, seed, budget.steps - budget.steps // 2)
            warmed = {f"frozen_{name}": value for name, value in pretraining_metrics(heads).items()}
            return pretraining_metrics(output) | warmed

        return self.store.get_or_run(self.key(arm, seed, ADAPTATION), step)

    def pretrain(self, start: Path, flags: tuple[str, ...], output: Path, seed: int, steps: int) -> None:
        """`training/pretrain.py` from `start` on the corpus for `steps` steps of the budget (later flags win)."""
        budget = self.budget
        run_script(pretrain.main, [
            "--model_name_or_path", start, "--train_file", self.corpus_file, "--output_dir", output, "--seed", seed,
            "--max_steps", steps, "--per_device_train_batch_size", budget.batch_size,
            "--learning_rate", budget.learning_rate, "--warmup_steps", budget.warmup_steps,
            "--max_seq_length", budget.max_seq_length, "--validation_split_percentage", budget.validation_percentage,
            "--eval_strategy", "steps", "--eval_steps", max(1, steps // budget.pretraining_evaluations),
            "--save_steps", checkpoint_every(steps), "--report_to", "none", *self.precision, *flags,
        ])

    def distil(self, arm: AdaptationArm, seed: int, output: Path) -> dict:
        """Pseudo-label distillation with `training/finetune.py` on the corpus alone: the arm's pseudo-queries, its
        negatives from its source, the margins of BM25 and the start (frozen) as targets; as many texts as
        every arm sees (steps x batch pseudo-queries, one pass). The run keeps its own start when no round beats it on
        its pseudo-dev; continuing another arm's model with the start as a candidate, it trains the better of the two
        there."""
        budget = self.budget
        student = self.start
        if arm.student != START.key:
            self.adapt(BY_KEY[arm.student], seed)
            student = self.model_dir(BY_KEY[arm.student], seed)
        run_script(finetune.main, [
            *recipe(LABEL_FREE_RECIPE), "--model_name_or_path", student, "--corpus_file", self.corpus_file,
            "--pseudo_queries", *arm.pseudo_queries, "--teacher", "bm25", self.start,
            *((f"sparse:{self.sparse_teacher}",) if arm.sparse_teacher else ()), "--negatives", arm.negatives,
            "--negatives_per_query", arm.negatives_per_query,
            "--max_train_queries", budget.steps * budget.batch_size, "--max_steps", budget.steps,
            "--per_device_train_batch_size", budget.batch_size, "--learning_rate", budget.learning_rate,
            "--warmup_steps", budget.warmup_steps, "--max_seq_length", budget.max_seq_length, "--seed", seed,
            "--published_max_seq_length", self.start_length,  # as the start is served, whatever the student's folder says
            "--output_dir", output, "--cache_dir", self.cache_dir, "--eval_strategy", "no", "--report_to", "none",
            "--save_steps", checkpoint_every(budget.steps),
            *(("--candidate_starts", self.start) if arm.start_is_candidate else ()),
            *(("--dev_pseudo_queries", *arm.dev_pseudo_queries) if arm.dev_pseudo_queries else ()), *self.precision,
        ])
        return distillation_metrics(output)

    def evaluate(self, retriever, collection: Collection, per_query: bool = False) -> dict:
        """nDCG@10 and Recall@100 on `collection`, and, for a model, how alike the corpus' vectors are (the mean cosine
        of two different documents: a collapsing encoder drives it towards 1); with `per_query`, each query's nDCG@10
        too, which the keep-or-publish decision resamples as fine-tuning's guard does."""
        result = evaluate_retriever(retriever, collection, metrics=METRICS)
        vectors = getattr(retriever, "corpus_vectors", None)
        found = {**result.metrics, "mean_pairwise_cosine": None if vectors is None else mean_pairwise_cosine(vectors())}
        if per_query:
            found[PER_QUERY] = per_query_metric(collection.qrels, result.run, METRICS[0])
        return found

    def retriever(self, arm: AdaptationArm, seed: int, label: str, max_seq_length: int | None = None):
        """The arm's trained model as a dense retriever at `max_seq_length` (default: the length the start is used
        at), or, for the fusion row, the RRF of BM25 and the start."""
        max_seq_length = max_seq_length or self.start_length
        if arm.fusion:
            start = dense_retriever(self.start, f"{label}/start", self.cache_dir, max_seq_length=max_seq_length)
            return HybridRetriever([BM25Retriever(show_progress_bar=False), start], "rrf", name=label)
        return dense_retriever(self.model_dir(arm, seed), label, self.cache_dir, max_seq_length=max_seq_length)

    def zero_shot(self, arm: AdaptationArm, seed: int) -> dict:
        # The start and the fusion row are the same for every seed: evaluated once.
        key = self.key(arm, seed if arm.adapts else None, ZERO_SHOT)
        return self.store.get_or_run(key, lambda: self.evaluate(self.retriever(arm, seed, key), self.test))

    def pseudo_dev(self, arm: AdaptationArm, seed: int) -> dict:
        """The trained model scored on the seed's pseudo-dev, at the length fine-tuning judges and publishes it at:
        the start's own (all-MiniLM-L6-v2's 256 tokens), not the training length."""
        key = self.key(arm, seed, PSEUDO_DEV)
        return self.store.get_or_run(key, lambda: self.evaluate(
            self.retriever(arm, seed, key, max_seq_length=self.start_length), self.pseudo_dev_collection(seed),
            per_query=True,
        ))

    def pseudo_dev_collection(self, seed: int) -> Collection:
        """The dev split a sentences pseudo-label run with `seed` holds out (the fine-tuning pipeline's own draw)."""
        if seed not in self._pseudo_devs:
            data = FinetuningDataArguments(
                corpus_file=[self.corpus_file], pseudo_queries=[PSEUDO_DEV_KIND],
                max_train_queries=self.budget.steps * self.budget.batch_size,
            )
            self._pseudo_devs[seed] = load_training_set(data, seed).dev
        return self._pseudo_devs[seed]

    def few_shot(self, arm: AdaptationArm, seed: int, k: int) -> dict:
        """Fine-tune the arm's model on k training queries drawn with the seed (the same queries for every arm) with
        the budget's recipe, keeping the start's pooling, then evaluate it."""
        output = self.folder(arm, seed) / f"k{k}"
        key = self.key(arm, seed, few_shot_label(k))
        budget = self.budget

        def step() -> dict:
            run_script(finetune.main, [
                "--model_name_or_path", self.model_dir(arm, seed), "--data_dir", self.data_dir,
                "--max_train_queries", k, "--seed", seed, "--output_dir", output, "--cache_dir", self.cache_dir,
                "--max_seq_length", budget.max_seq_length, "--per_device_train_batch_size", budget.finetuning_batch_size,
                "--max_steps", budget.finetuning_steps, "--learning_rate", budget.finetuning_learning_rate,
                *budget.finetuning_recipe, "--eval_strategy", "no", "--report_to", "none", *self.precision,
            ])
            return self.evaluate(dense_retriever(output, key, self.cache_dir, max_seq_length=self.start_length), self.test)

        return self.store.get_or_run(key, step)


def settings_of(budget: AdaptationBudget, start: Path, split: str, collections: dict[str, Path]) -> dict:
    """What defines every step, as JSON reads it back (tuples become lists); seeds and few-shot k may change."""
    steps = {name: value for name, value in asdict(budget).items() if name not in ("description", "seeds", "few_shot")}
    return json.loads(json.dumps({
        "start": str(Path(start).resolve()), "split": split, "precision": precision_flags(), "budget": steps,
        "collections": {name: str(Path(folder).resolve()) for name, folder in collections.items()},
    }))


def mean_pairwise_cosine(vectors: np.ndarray, sample: int = 2000) -> float:
    """Mean cosine over pairs of different rows of the first `sample` L2-normalised vectors."""
    vectors = vectors[:sample].astype(np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True).clip(min=1e-12)
    count = len(vectors)
    total = float(np.square(vectors.sum(axis=0)).sum())  # every pair, each row with itself included
    return (total - count) / (count * (count - 1))


def pretraining_metrics(output_dir: Path) -> dict:
    """The pre-training run's final validation losses and cls_information (None for a term it did not train)."""
    results = json.loads((output_dir / "all_results.json").read_text())
    return {name: results.get(f"eval_{name}") for name in PRETRAINING_METRICS} | {"train_loss": results.get("train_loss")}


def distillation_metrics(output_dir: Path) -> dict:
    """A pseudo-label run's own pseudo-dev nDCG@10 for its start and its round, whether it kept the start, how often
    its teacher scored the source passage above the mined negative (how much the pseudo-labels say beyond the
    pseudo-query's own passage), its training loss, and, where it had candidate starts, whether it trained the one it
    was given (another arm's model) rather than the start."""
    run = FinetuningRun(output_dir)
    trained, metric = run.round(1), run.primary_metric
    losses = [entry["loss"] for entry in trained.log_history() if "loss" in entry]
    scores = np.asarray(run.round_examples(1)["scores"])
    candidates = {}
    if run.candidate_starts_dev_metrics is not None:
        candidates = {"trained_the_given_start": run.trained_start == run.arguments["model"]["model_name_or_path"]}
    return {
        **candidates,
        "own_pseudo_dev_start": run.start_dev_metrics[metric], "own_pseudo_dev_round": trained.dev_metrics()[metric],
        "kept_start": run.published_round is None,  # the run's own rule
        "teacher_prefers_source": float(np.mean(scores[:, 0] > scores[:, 1:].max(axis=1))),
        "first_loss": losses[0] if losses else None, "train_loss": losses[-1] if losses else None,
    }


def tsdae_metrics(output_dir: Path) -> dict:
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    losses = [entry["loss"] for entry in history if "loss" in entry]
    return {"first_loss": losses[0] if losses else None, "train_loss": losses[-1] if losses else None}
