"""The SEED paper's ablation as steps: pre-train each arm, then evaluate it as a [CLS] dense encoder and as a SPLADE
model on its own MLM head, zero-shot and after few-shot fine-tuning, for each seed; when pre-training continues a
trained encoder, the starting checkpoint itself is evaluated the same way (the `start` row).

The arms differ only in the decoder: none (MLM only), SEED's weak one, a strong one, or a sweep of depth x span.
Everything else is the same for all of them: tokenizer, pre-training text, steps, batch, learning-rate schedule,
seed, and the fine-tuning recipe with its few-shot queries. Every step runs the package's own code:
`training/pretrain.py` and `training/finetune.py` through their `main`, and the evaluation package. A finished
step's result is kept (harness.ResultStore) and the pipelines resume their own folders, so an interrupted table,
rerun with the same command, continues where it stopped.

The work folder:

    settings.json                         what defines every step; a rerun with other settings is refused
    results.json                          the finished steps' results, by step
    tokenizer/                            --from scratch: the WordPiece tokenizer every arm shares
    <arm>/seed-<S>/pretrained/            the arm's pre-training run: eval_cls_information at every evaluation in
                                          trainer_state.json, drawn in loss_curves.png
    <arm>/seed-<S>/<kind>-k<K>/           fine-tuned as a dense or sparse model on K training queries drawn with seed S
                                          (<kind>-kall: all of them); start/seed-<S>/<kind>-k<K>/ for the start row
    embedding-cache/                      dense corpus embeddings of the evaluated models
"""

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.harness import (
    ResultStore, changed_settings, dense_retriever, precision_flags, run_script, sparse_retriever,
)
from training import finetune, pretrain
from training.common.errors import InputError
from training.data.collection import load_collection
from training.evaluation.evaluate import evaluate_retriever
from training.data.corpus import check_train_files, load_raw_corpus
from training.pretraining.model_card import loss_curves_plot
from training.pretraining.tokenizer import train_wordpiece_tokenizer

SCRATCH = "scratch"
METRICS = ("ndcg@10", "recall@100")
ZERO_SHOT = "zero-shot"
PRETRAINING = "pretraining"
# How every model is evaluated: its [CLS] vector (dense) and SPLADE on its own MLM head (sparse).
KINDS = ("dense", "sparse")
# (pre-training, fine-tuning) peak learning rates: a new model learns fast, an already trained encoder is nudged
# (1e-4: the rate the issue-20 warm runs from splade-tiny measured; its fresh decoder trains at 10x, the pre-training
# pipeline's warm-start default).
LEARNING_RATES = {"scratch": (5e-4, 1e-4), "warm": (1e-4, 2e-5)}
# The pre-training metrics the table reports, as the pipeline logs them on its validation split.
PRETRAINING_METRICS = ("cls_information", "mlm_loss", "decoder_loss")


@dataclass(frozen=True)
class Arm:
    """One pre-training setting: a decoder of `decoder_num_layers` layers and span `decoder_attention_span`
    (a number or "full"), or none at all (MLM only, decoder_loss_weight 0)."""

    name: str
    decoder_num_layers: int | None = None
    decoder_attention_span: str | None = None
    pretrains: bool = True  # False: the start row, the starting checkpoint evaluated as it is

    @property
    def key(self) -> str:
        """Its folder and result name: the same whether the arm runs among the main arms or in the sweep."""
        if not self.pretrains:
            return "start"
        if self.decoder_num_layers is None:
            return "mlm-only"
        return f"decoder-{self.decoder_num_layers}-span-{self.decoder_attention_span}"

    def pretraining_flags(self) -> list[str]:
        if self.decoder_num_layers is None:
            return ["--decoder_loss_weight", "0"]
        return [
            "--decoder_num_layers", str(self.decoder_num_layers), "--decoder_attention_span", self.decoder_attention_span,
        ]


START = Arm("start: the checkpoint as it is (no continued pre-training)", pretrains=False)
MLM_ONLY = Arm("MLM only (λ = 0)")
SEED = Arm("SEED (3 layers, span 2)", 3, "2")
STRONG_DECODER = Arm("strong decoder (3 layers, full span)", 3, "full")
SWEEP_DEPTHS = (1, 3)
SWEEP_SPANS = ("2", "8", "full")


def select_arms(sweep: bool) -> list[Arm]:
    """MLM only, SEED and the strong decoder; with `sweep`, MLM only and every decoder depth x span of the sweep."""
    if not sweep:
        return [MLM_ONLY, SEED, STRONG_DECODER]
    named = {arm.key: arm for arm in (SEED, STRONG_DECODER)}
    decoders = [Arm(f"decoder: {depth} layer(s), span {span}", depth, span) for depth in SWEEP_DEPTHS for span in SWEEP_SPANS]
    return [MLM_ONLY, *(named.get(arm.key, arm) for arm in decoders)]


@dataclass(frozen=True)
class Budget:
    """How much every step does; the same for every arm."""

    description: str
    seeds: tuple[int, ...]
    few_shot: tuple[int | None, ...]  # training queries of each few-shot fine-tuning; None: all of them
    max_seq_length: int  # tokens, in pre-training, fine-tuning and evaluation alike
    pretraining_steps: int
    pretraining_batch_size: int
    finetuning_steps: int
    finetuning_batch_size: int
    finetuning_recipe: tuple[str, ...]  # hard negatives and rounds, as training/finetune.py flags
    pretraining_evaluations: int  # on the validation split, evenly over the run: the cls_information curve
    scratch_config: str | None  # --from scratch: the model shape (a pretraining preset; None: --from PATH only) ...
    scratch_overrides: str | None  # ... with these config fields changed
    tokenizer_vocab_size: int | None  # --from scratch: the WordPiece vocabulary trained on the pre-training text
    validation_percentage: float  # of the pre-training text, held out; cls_information is measured on it


BUDGETS = {
    # For the test: a 2-layer, 64-wide model, a few steps of everything.
    "smoke": Budget(
        description="a pipeline check in seconds; the numbers mean nothing",
        seeds=(1, 2), few_shot=(8, None), max_seq_length=64,
        pretraining_steps=4, pretraining_batch_size=8, finetuning_steps=2, finetuning_batch_size=8,
        finetuning_recipe=("--negatives", "bm25"), pretraining_evaluations=2,
        scratch_config="seed-tiny", scratch_overrides="hidden_size=64,num_hidden_layers=2,num_attention_heads=2,intermediate_size=128",
        tokenizer_vocab_size=1000, validation_percentage=10,
    ),
    # From scratch, the three main arms, 2 seeds, zero-shot only. 200 steps (3 minutes an arm) left every arm at MLM
    # loss 7.1-7.2 and retrieving at chance, while evaluation took the rest of the hour; so the time now goes to
    # pre-training: 800 steps with 2 evaluations of the curve. Measured for MLM only: eval MLM loss 6.93 / 6.83 (seeds
    # 1, 2), 265 s of pre-training alone, still at chance; the decoder arms at this budget are not yet measured.
    "cpu-hour": Budget(
        description="under 1.5 hours on 2 CPU cores (estimated), from scratch: a pipeline check, short of the paper's effects",
        seeds=(1, 2), few_shot=(), max_seq_length=128,
        pretraining_steps=800, pretraining_batch_size=32, finetuning_steps=20, finetuning_batch_size=32,
        finetuning_recipe=("--negatives", "bm25"), pretraining_evaluations=2,
        scratch_config="seed-tiny", scratch_overrides=None, tokenizer_vocab_size=8000, validation_percentage=2,
    ),
    # Continued pre-training of a trained encoder (--from PATH, e.g. splade-tiny), long enough that SEED's fresh
    # decoder (at 10x the encoder's rate) ends >= 1.5 nats below its first evaluation. Measured from splade-tiny on
    # SciFact: its eval decoder loss fell 7.96 -> 7.43 -> 7.18 at steps 50, 100, 150 and was still falling; 1200
    # steps (first evaluation at 300) was an extrapolation. Measured since (seed 1): SEED's eval decoder loss went
    # 6.00 -> 5.27 -> 5.01 -> 4.93 at steps 300-1200 (cls_information 0.17 -> 0.43), 1.07 nats from first to last
    # evaluation, short of the 1.5 aimed at, and flattening as the learning rate decays to 0. Left at 1200 so the
    # table under way resumes (a changed budget is refused by its work folder).
    # Wall time on 2 idle cores, measured per part: pre-training 1200 steps is ~7 minutes for MLM only (3 steps/s)
    # and ~30 minutes for each decoder arm (1.5 s a step: the decoder's vocabulary projection at every position);
    # a zero-shot row ~3 minutes; a few-shot fine-tuning of 100 steps with its evaluation ~65-80 s dense and, sparse,
    # 11-13 minutes through SpladePooling or 4-7 minutes through TiledSpladeMax. The whole table (2 seeds, every row)
    # recorded 21,371 s (5.9 hours) of steps, on 2 cores often shared with other work.
    "cpu-warm": Budget(
        description="about 6 hours on 2 CPU cores (5.9 h measured; resumable), continuing a trained encoder (--from PATH only)",
        seeds=(1, 2), few_shot=(64, None), max_seq_length=128,
        pretraining_steps=1200, pretraining_batch_size=32, finetuning_steps=100, finetuning_batch_size=32,
        finetuning_recipe=("--negatives", "bm25"), pretraining_evaluations=4,
        scratch_config=None, scratch_overrides=None, tokenizer_vocab_size=None, validation_percentage=2,
    ),
    # GPU presets: sized from the CPU measurements and throughput ratios, not yet measured on a GPU.
    "gpu-hour": Budget(
        description="about an hour on one recent GPU (estimated): MiniLM-size encoder, 3 seeds, every k",
        seeds=(1, 2, 3), few_shot=(16, 64, None), max_seq_length=128,
        pretraining_steps=5000, pretraining_batch_size=128, finetuning_steps=300, finetuning_batch_size=64,
        finetuning_recipe=("--negatives", "self", "--mining_rounds", "2"), pretraining_evaluations=5,
        scratch_config="seed-small", scratch_overrides=None, tokenizer_vocab_size=30522, validation_percentage=2,
    ),
    "gpu-day": Budget(
        description="about a day on one recent GPU (estimated): the paper's BERT-base encoder, 5 seeds, every k",
        seeds=(1, 2, 3, 4, 5), few_shot=(16, 64, None), max_seq_length=256,
        pretraining_steps=50000, pretraining_batch_size=256, finetuning_steps=1000, finetuning_batch_size=64,
        finetuning_recipe=("--negatives", "self", "--mining_rounds", "2"), pretraining_evaluations=10,
        scratch_config="seed-base", scratch_overrides=None, tokenizer_vocab_size=30522, validation_percentage=1,
    ),
}


def few_shot_label(k: int | None) -> str:
    return "k=all" if k is None else f"k={k}"


def evaluations(few_shot: tuple[int | None, ...]) -> list[str]:
    """The evaluations of every arm and seed, in table order: dense zero-shot, dense after each few-shot k, then the
    same sparse ("dense zero-shot", "dense k=64", ..., "sparse k=all")."""
    return [f"{kind} {shot}" for kind in KINDS for shot in (ZERO_SHOT, *map(few_shot_label, few_shot))]


class Ablation:
    """The steps of the table over one work folder: each step's result is computed once, then read back."""

    def __init__(
        self, work_dir: Path, data_dir: str, split: str, start: str, pretrain_files: list[str] | None, budget: Budget,
    ):
        self.work = Path(work_dir)
        self.data_dir = data_dir
        self.start = start
        self.budget = budget
        self.from_scratch = start == SCRATCH
        if self.from_scratch and budget.scratch_config is None:
            raise InputError(
                f"--from scratch: this budget continues a trained encoder ({budget.description}). Pass --from PATH "
                "(e.g. ../shared/models/splade-tiny), or a budget with a model shape of its own (cpu-hour, gpu-hour)."
            )
        if not self.from_scratch and not Path(start).is_dir():
            raise InputError(
                f"--from {start}: no such folder. Pass `scratch` or a local encoder folder to continue pre-training "
                "(a BERT checkpoint such as the all-MiniLM-L6-v2 folder, or a SEED pretraining folder)."
            )
        self.pretrain_files = [str(path) for path in pretrain_files or [Path(data_dir) / "corpus.jsonl"]]
        check_train_files(self.pretrain_files, "text", argument="--pretrain_files")
        self.test = load_collection(data_dir, split)
        self.pretraining_learning_rate, self.finetuning_learning_rate = LEARNING_RATES[
            SCRATCH if self.from_scratch else "warm"
        ]
        self.precision = precision_flags()
        budget_settings = {name: value for name, value in asdict(budget).items() if name not in ("description", "seeds", "few_shot")}
        # As JSON reads them back (tuples become lists), to compare with a work folder's settings.json.
        self.settings = json.loads(json.dumps({
            "data_dir": str(Path(data_dir).resolve()), "split": split,
            "from": start if self.from_scratch else str(Path(start).resolve()),
            "pretrain_files": [str(Path(path).resolve()) for path in self.pretrain_files],
            "precision": self.precision, "budget": budget_settings,
        }))
        self.store = None

    def open(self) -> None:
        """Check the work folder holds steps of this same table (or none) and start its result store."""
        path = self.work / "settings.json"
        if path.is_file():
            differences = changed_settings(json.loads(path.read_text()), self.settings)
            if differences:
                raise InputError(
                    f"--work_dir: {self.work} holds a table made with other settings ({', '.join(differences)} differ). "
                    "Rerun with the same settings to resume it (seeds and few-shot k may change), or choose another "
                    "--work_dir."
                )
        self.work.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.settings, indent=2))
        self.store = ResultStore(self.work / "results.json")
        if self.from_scratch:
            self.train_shared_tokenizer()

    def run(
        self, arms: list[Arm], seeds: tuple[int, ...], few_shot: tuple[int | None, ...],
        after_each: Callable[[dict], None] = lambda results: None, only: set[str] | None = None,
    ) -> dict:
        """Every arm's steps, seed by seed (so both seeds' arms compare early); results[arm key][seed][step]. With
        --from PATH the start row comes first; `only`: just the rows of these keys. `after_each` is called with the
        results so far after each arm and seed."""
        self.open()
        arms = [arm for arm in self.rows(arms) if only is None or arm.key in only]
        results = {arm.key: {} for arm in arms}
        for seed_number, seed in enumerate(seeds, start=1):
            for arm_number, arm in enumerate(arms, start=1):
                print(f"\n=== seed {seed} ({seed_number}/{len(seeds)}), arm {arm_number}/{len(arms)}: {arm.name} ===",
                      flush=True)
                steps = {PRETRAINING: self.pretrain(arm, seed)} if arm.pretrains else {}
                for kind in KINDS:
                    steps[f"{kind} {ZERO_SHOT}"] = self.zero_shot(arm, seed, kind)
                    for k in few_shot:
                        steps[f"{kind} {few_shot_label(k)}"] = self.few_shot(arm, seed, k, kind)
                results[arm.key][seed] = steps
                after_each(results)
        return results

    def rows(self, arms: list[Arm]) -> list[Arm]:
        """The table's rows: the arms, after the start row when pre-training continues a trained encoder."""
        return arms if self.from_scratch else [START, *arms]

    def folder(self, arm: Arm, seed: int) -> Path:
        return self.work / arm.key / f"seed-{seed}"

    def model_dir(self, arm: Arm, seed: int) -> Path:
        """The model the arm's evaluations start from: its pre-training run, or for the start row the checkpoint."""
        return self.folder(arm, seed) / "pretrained" if arm.pretrains else Path(self.start)

    @property
    def tokenizer_dir(self) -> Path:
        return self.work / "tokenizer"

    def train_shared_tokenizer(self) -> None:
        """The WordPiece tokenizer every arm from scratch uses, trained once on the pre-training text."""
        if (self.tokenizer_dir / "tokenizer.json").is_file():
            return
        print(f"Training a {self.budget.tokenizer_vocab_size}-token WordPiece tokenizer on the pre-training text", flush=True)
        texts = load_raw_corpus(self.pretrain_files, None, "text", argument="--pretrain_files")["text"]
        tokenizer = train_wordpiece_tokenizer(texts, self.budget.tokenizer_vocab_size, self.budget.max_seq_length)
        partial = self.tokenizer_dir.with_name(self.tokenizer_dir.name + ".partial")
        tokenizer.save_pretrained(partial)
        partial.replace(self.tokenizer_dir)

    def model_source_flags(self) -> list:
        if not self.from_scratch:
            return ["--model_name_or_path", self.start]
        flags = ["--config_name", self.budget.scratch_config, "--tokenizer_name", self.tokenizer_dir]
        if self.budget.scratch_overrides:
            flags += ["--config_overrides", self.budget.scratch_overrides]
        return flags

    def pretrain(self, arm: Arm, seed: int) -> dict:
        output = self.folder(arm, seed) / "pretrained"
        budget = self.budget

        def step() -> dict:
            run_script(pretrain.main, [
                *self.model_source_flags(), *arm.pretraining_flags(), "--train_file", *self.pretrain_files,
                "--output_dir", output, "--seed", seed, "--max_steps", budget.pretraining_steps,
                "--per_device_train_batch_size", budget.pretraining_batch_size,
                "--learning_rate", self.pretraining_learning_rate, "--max_seq_length", budget.max_seq_length,
                "--validation_split_percentage", budget.validation_percentage, "--eval_strategy", "steps",
                "--eval_steps", max(1, budget.pretraining_steps // budget.pretraining_evaluations),
                "--save_steps", max(1, budget.pretraining_steps // 4), "--report_to", "none", *self.precision,
            ])
            return pretraining_metrics(output)

        return self.store.get_or_run(f"{arm.key}/seed-{seed}/{PRETRAINING}", step)

    def evaluate(self, model_dir: Path, name: str, kind: str) -> dict:
        """nDCG@10 and Recall@100 on the evaluation split of the model's [CLS] vectors (dense) or of SPLADE on its
        MLM head (sparse)."""
        if kind == "dense":
            retriever = dense_retriever(
                model_dir, name, self.work / "embedding-cache", pooling="cls", max_seq_length=self.budget.max_seq_length
            )
        else:
            retriever = sparse_retriever(
                model_dir, name, self.work / "embedding-cache", max_seq_length=self.budget.max_seq_length
            )
        return evaluate_retriever(retriever, self.test, metrics=METRICS).metrics

    def zero_shot(self, arm: Arm, seed: int, kind: str) -> dict:
        evaluation = f"{kind} {ZERO_SHOT}"
        # The starting checkpoint is the same for every seed: evaluated once.
        key = f"{arm.key}/{evaluation}" if not arm.pretrains else f"{arm.key}/seed-{seed}/{evaluation}"
        return self.store.get_or_run(
            key, lambda: self.evaluate(self.model_dir(arm, seed), f"{arm.key} seed {seed} {evaluation}", kind)
        )

    def few_shot(self, arm: Arm, seed: int, k: int | None, kind: str) -> dict:
        """Fine-tune the arm's model as a dense [CLS] or a sparse SPLADE model on k training queries drawn with the
        seed (the same queries for every arm), with the budget's recipe, then evaluate the fine-tuned model."""
        output = self.folder(arm, seed) / f"{kind}-k{'all' if k is None else k}"
        evaluation = f"{kind} {few_shot_label(k)}"
        budget = self.budget

        def step() -> dict:
            run_script(finetune.main, [
                "--model_name_or_path", self.model_dir(arm, seed), *(["--pooling", "cls"] if kind == "dense" else ["--sparse"]),
                "--data_dir", self.data_dir, *([] if k is None else ["--max_train_queries", k]), "--seed", seed,
                "--output_dir", output, "--max_seq_length", budget.max_seq_length,
                "--per_device_train_batch_size", budget.finetuning_batch_size,
                "--max_steps", budget.finetuning_steps, "--learning_rate", self.finetuning_learning_rate,
                *budget.finetuning_recipe, "--eval_strategy", "no", "--report_to", "none", *self.precision,
            ])
            return self.evaluate(output, f"{arm.key} seed {seed} {evaluation}", kind)

        return self.store.get_or_run(f"{arm.key}/seed-{seed}/{evaluation}", step)


def first_middle_last(values: list[float]) -> list[float] | None:
    return [values[0], values[len(values) // 2], values[-1]] if values else None


def pretraining_metrics(output_dir: Path) -> dict:
    """The pre-training run's final validation metrics (cls_information is None for an arm without a decoder), the
    first, middle and last of the cls_information its evaluations logged, its decoder loss at the first of them, and
    the PNG that draws its curves."""
    results = json.loads((output_dir / "all_results.json").read_text())
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]

    def curve(name: str) -> list[float]:
        # By step: the evaluation after training repeats the last periodic one.
        return list({entry["step"]: entry[name] for entry in history if name in entry}.values())

    decoder_losses = curve("eval_decoder_loss")
    return {
        **{name: results.get(f"eval_{name}") for name in PRETRAINING_METRICS},
        "cls_information_curve": first_middle_last(curve("eval_cls_information")),
        "first_decoder_loss": decoder_losses[0] if decoder_losses else None,
        "plot": str(loss_curves_plot(output_dir)),
    }
