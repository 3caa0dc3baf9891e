"""Label-free domain adaptation as steps: continue a trained Siamese encoder on a collection's corpus alone with each
objective (MLM, TSDAE, SEED's weak decoder, a strong decoder, the weak decoder alone), then evaluate it zero-shot
and after few-shot fine-tuning; the start itself, unadapted, is a row too.

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
    <collection>/<arm>/seed-<S>/adapted/   the arm's adapted model (pretraining folder, or TSDAE's SentenceTransformer)
    <collection>/<arm>/seed-<S>/k<K>/      fine-tuned on K training queries drawn with seed S (start/seed-<S>/k<K> too)
    embedding-cache/                       corpus embeddings of the evaluated models, keyed by their weights
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from harness import ResultStore, dense_retriever, precision_flags, run_script
from training import finetune, pretrain
from training.common.corpus import check_train_files
from training.evaluation.collection import load_collection
from training.evaluation.evaluate import evaluate_retriever
from tsdae import train_tsdae

METRICS = ("ndcg@10", "recall@100")
ZERO_SHOT = "zero-shot"
ADAPTATION = "adaptation"
PRETRAINING_METRICS = ("cls_information", "mlm_loss", "decoder_loss")


@dataclass(frozen=True)
class AdaptationArm:
    """One way to continue the start on the corpus: pre-training flags for `training/pretrain.py`, TSDAE, or none."""

    key: str
    name: str
    pretraining_flags: tuple[str, ...] | None = None
    tsdae: bool = False

    @property
    def adapts(self) -> bool:
        return self.tsdae or self.pretraining_flags is not None


# The weak decoder of the paper: 3 layers, span 2. The condition is left to the start's pooling (the default a
# SentenceTransformer start gets), so the decoder reads the vector the start retrieves with.
WEAK = ("--decoder_num_layers", "3", "--decoder_attention_span", "2")
START = AdaptationArm("start", "no adaptation (the start as it is)")
ARMS = (
    START,
    AdaptationArm("mlm", "MLM only (λ = 0)", ("--decoder_loss_weight", "0")),
    AdaptationArm("tsdae", "TSDAE (sentence-transformers, deletion 0.6, tied decoder)", tsdae=True),
    AdaptationArm("seed", "SEED: MLM + weak decoder (3 layers, span 2) on the pooled vector", WEAK),
    AdaptationArm(
        "strong-decoder", "MLM + strong decoder (3 layers, full span) on the pooled vector",
        ("--decoder_num_layers", "3", "--decoder_attention_span", "full"),
    ),
    AdaptationArm("decoder-only", "weak decoder alone (no MLM) on the pooled vector", (*WEAK, "--mlm_loss_weight", "0")),
)


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
    # Sized from the CPU measurements, not yet run on a GPU.
    "gpu": AdaptationBudget(
        description="about an hour on one recent GPU (estimated): 1,000 steps x 64 texts an arm, 3 seeds",
        seeds=(1, 2, 3), few_shot=(64,), steps=1000, batch_size=64, max_seq_length=256, learning_rate=3e-5,
        warmup_steps=0.06, validation_percentage=2, pretraining_evaluations=4, finetuning_steps=200,
        finetuning_batch_size=32, finetuning_learning_rate=2e-5, finetuning_recipe=("--negatives", "bm25"),
    ),
}


def few_shot_label(k: int) -> str:
    return f"k={k}"


class Adaptation:
    """The steps of the benchmark on one collection, in a work folder shared by every collection."""

    def __init__(self, work_dir: Path, name: str, data_dir: Path, split: str, start: Path, budget: AdaptationBudget):
        self.work = Path(work_dir)
        self.name = name
        self.data_dir = Path(data_dir)
        self.start = Path(start)
        self.budget = budget
        self.corpus_file = str(self.data_dir / "corpus.jsonl")
        check_train_files([self.corpus_file], "text", argument="--data_dir")
        self.test = load_collection(str(self.data_dir), split)
        self.precision = precision_flags()
        self.store: ResultStore | None = None

    def attach(self, store: ResultStore) -> None:
        self.store = store

    def folder(self, arm: AdaptationArm, seed: int) -> Path:
        return self.work / self.name / arm.key / f"seed-{seed}"

    def model_dir(self, arm: AdaptationArm, seed: int) -> Path:
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
            run_script(pretrain.main, [
                "--model_name_or_path", self.start, *arm.pretraining_flags, "--train_file", self.corpus_file,
                "--output_dir", output, "--seed", seed, "--max_steps", budget.steps,
                "--per_device_train_batch_size", budget.batch_size, "--learning_rate", budget.learning_rate,
                "--warmup_steps", budget.warmup_steps, "--max_seq_length", budget.max_seq_length,
                "--validation_split_percentage", budget.validation_percentage, "--eval_strategy", "steps",
                "--eval_steps", max(1, budget.steps // budget.pretraining_evaluations),
                "--save_steps", max(1, budget.steps // 2), "--report_to", "none", *self.precision,
            ])
            return pretraining_metrics(output)

        return self.store.get_or_run(self.key(arm, seed, ADAPTATION), step)

    def evaluate(self, model_dir: Path, label: str) -> dict:
        """nDCG@10 and Recall@100 on the evaluation split, and how alike the corpus' vectors are (the mean cosine of
        two different documents: a collapsing encoder drives it towards 1)."""
        retriever = dense_retriever(model_dir, label, self.work / "embedding-cache")
        result = evaluate_retriever(retriever, self.test, metrics=METRICS)
        return {**result.metrics, "mean_pairwise_cosine": mean_pairwise_cosine(retriever.corpus_vectors())}

    def zero_shot(self, arm: AdaptationArm, seed: int) -> dict:
        # The start is the same for every seed: evaluated once.
        key = self.key(arm, seed if arm.adapts else None, ZERO_SHOT)
        return self.store.get_or_run(key, lambda: self.evaluate(self.model_dir(arm, seed), key))

    def few_shot(self, arm: AdaptationArm, seed: int, k: int) -> dict:
        """Fine-tune the arm's model on k training queries drawn with the seed (the same queries for every arm) with
        the budget's recipe, keeping the start's pooling, then evaluate it."""
        output = self.folder(arm, seed) / f"k{k}"
        key = self.key(arm, seed, few_shot_label(k))
        budget = self.budget

        def step() -> dict:
            run_script(finetune.main, [
                "--model_name_or_path", self.model_dir(arm, seed), "--data_dir", self.data_dir,
                "--max_train_queries", k, "--seed", seed, "--output_dir", output,
                "--max_seq_length", budget.max_seq_length, "--per_device_train_batch_size", budget.finetuning_batch_size,
                "--max_steps", budget.finetuning_steps, "--learning_rate", budget.finetuning_learning_rate,
                *budget.finetuning_recipe, "--eval_strategy", "no", "--report_to", "none", *self.precision,
            ])
            return self.evaluate(output, key)

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


def tsdae_metrics(output_dir: Path) -> dict:
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    losses = [entry["loss"] for entry in history if "loss" in entry]
    return {"first_loss": losses[0] if losses else None, "train_loss": losses[-1] if losses else None}
