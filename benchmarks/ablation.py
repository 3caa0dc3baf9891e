"""The SEED paper's ablation as steps: pre-train each arm, then evaluate its [CLS] encoder zero-shot and after few-shot
fine-tuning, for each seed.

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
    <arm>/seed-<S>/pretrained/            the arm's pre-training run (eval_cls_information in its all_results.json)
    <arm>/seed-<S>/finetuned-k<K>/        fine-tuned on K training queries drawn with seed S (finetuned-kall: all)
    embedding-cache/                      corpus embeddings of the evaluated models
"""

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from harness import ResultStore, dense_retriever, precision_flags, run_script
from training import finetune, pretrain
from training.common.errors import InputError
from training.evaluation.collection import load_collection
from training.evaluation.evaluate import evaluate_retriever
from training.common.corpus import check_train_files, load_raw_corpus
from training.pretraining.tokenizer import train_wordpiece_tokenizer

SCRATCH = "scratch"
METRICS = ("ndcg@10", "recall@100")
ZERO_SHOT = "zero-shot"
PRETRAINING = "pretraining"
# (pre-training, fine-tuning) peak learning rates: a new model learns fast, an already trained encoder is nudged.
LEARNING_RATES = {"scratch": (5e-4, 1e-4), "warm": (5e-5, 2e-5)}
# The pre-training metrics the table reports, as the pipeline logs them on its validation split.
PRETRAINING_METRICS = ("cls_information", "mlm_loss", "decoder_loss")


@dataclass(frozen=True)
class Arm:
    """One pre-training setting: a decoder of `decoder_num_layers` layers and span `decoder_attention_span`
    (a number or "full"), or none at all (MLM only, decoder_loss_weight 0)."""

    name: str
    decoder_num_layers: int | None = None
    decoder_attention_span: str | None = None

    @property
    def key(self) -> str:
        """Its folder and result name: the same whether the arm runs among the main arms or in the sweep."""
        if self.decoder_num_layers is None:
            return "mlm-only"
        return f"decoder-{self.decoder_num_layers}-span-{self.decoder_attention_span}"

    def pretraining_flags(self) -> list[str]:
        if self.decoder_num_layers is None:
            return ["--decoder_loss_weight", "0"]
        return [
            "--decoder_num_layers", str(self.decoder_num_layers), "--decoder_attention_span", self.decoder_attention_span,
        ]


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
    scratch_config: str  # --from scratch: the model shape (a pretraining preset) ...
    scratch_overrides: str | None  # ... with these config fields changed
    tokenizer_vocab_size: int  # --from scratch: the WordPiece vocabulary trained on the pre-training text
    validation_percentage: float  # of the pre-training text, held out; cls_information is measured on it


BUDGETS = {
    # For the test: a 2-layer, 64-wide model, a few steps of everything.
    "smoke": Budget(
        description="a pipeline check in seconds; the numbers mean nothing",
        seeds=(1, 2), few_shot=(8, None), max_seq_length=64,
        pretraining_steps=4, pretraining_batch_size=8, finetuning_steps=2, finetuning_batch_size=8,
        finetuning_recipe=("--negatives", "bm25"),
        scratch_config="seed-tiny", scratch_overrides="hidden_size=64,num_hidden_layers=2,num_attention_heads=2,intermediate_size=128",
        tokenizer_vocab_size=1000, validation_percentage=10,
    ),
    # The three main arms, 2 seeds, zero-shot and one few-shot k: 32 minutes measured on SciFact on one thread of a
    # 2-core machine (README). Far too little pre-training for the paper's effects: a check of the pipeline, not of
    # the claims.
    "cpu-hour": Budget(
        description="about an hour on 2 CPU cores: a pipeline check, too short for the paper's effects",
        seeds=(1, 2), few_shot=(64,), max_seq_length=128,
        pretraining_steps=200, pretraining_batch_size=32, finetuning_steps=20, finetuning_batch_size=32,
        finetuning_recipe=("--negatives", "bm25"),
        scratch_config="seed-tiny", scratch_overrides=None, tokenizer_vocab_size=8000, validation_percentage=2,
    ),
    # GPU presets: sized from the CPU measurements and throughput ratios, not yet measured on a GPU.
    "gpu-hour": Budget(
        description="about an hour on one recent GPU (estimated): MiniLM-size encoder, 3 seeds, every k",
        seeds=(1, 2, 3), few_shot=(16, 64, None), max_seq_length=128,
        pretraining_steps=5000, pretraining_batch_size=128, finetuning_steps=300, finetuning_batch_size=64,
        finetuning_recipe=("--negatives", "self", "--mining_rounds", "2"),
        scratch_config="seed-small", scratch_overrides=None, tokenizer_vocab_size=30522, validation_percentage=2,
    ),
    "gpu-day": Budget(
        description="about a day on one recent GPU (estimated): the paper's BERT-base encoder, 5 seeds, every k",
        seeds=(1, 2, 3, 4, 5), few_shot=(16, 64, None), max_seq_length=256,
        pretraining_steps=50000, pretraining_batch_size=256, finetuning_steps=1000, finetuning_batch_size=64,
        finetuning_recipe=("--negatives", "self", "--mining_rounds", "2"),
        scratch_config="seed-base", scratch_overrides=None, tokenizer_vocab_size=30522, validation_percentage=1,
    ),
}


def few_shot_label(k: int | None) -> str:
    return "k=all" if k is None else f"k={k}"


def evaluations(few_shot: tuple[int | None, ...]) -> list[str]:
    """The evaluations of every arm and seed, in table order: zero-shot, then each few-shot k."""
    return [ZERO_SHOT, *map(few_shot_label, few_shot)]


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
            previous = json.loads(path.read_text())
            differences = [name for name in self.settings if previous.get(name) != self.settings[name]]
            if differences:
                raise InputError(
                    f"--work_dir {self.work} holds a table made with other settings ({', '.join(differences)} differ). "
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
        after_each: Callable[[dict], None] = lambda results: None,
    ) -> dict:
        """Every arm's steps, seed by seed (so both seeds' arms compare early); results[arm key][seed][step].
        `after_each` is called with the results so far after each arm and seed."""
        self.open()
        results = {arm.key: {} for arm in arms}
        for seed_number, seed in enumerate(seeds, start=1):
            for arm_number, arm in enumerate(arms, start=1):
                print(f"\n=== seed {seed} ({seed_number}/{len(seeds)}), arm {arm_number}/{len(arms)}: {arm.name} ===",
                      flush=True)
                steps = {PRETRAINING: self.pretrain(arm, seed), ZERO_SHOT: self.zero_shot(arm, seed)}
                for k in few_shot:
                    steps[few_shot_label(k)] = self.few_shot(arm, seed, k)
                results[arm.key][seed] = steps
                after_each(results)
        return results

    def folder(self, arm: Arm, seed: int) -> Path:
        return self.work / arm.key / f"seed-{seed}"

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
                "--validation_split_percentage", budget.validation_percentage,
                "--save_steps", max(1, budget.pretraining_steps // 4), "--report_to", "none", *self.precision,
            ])
            return pretraining_metrics(output)

        return self.store.get_or_run(f"{arm.key}/seed-{seed}/{PRETRAINING}", step)

    def evaluate(self, model_dir: Path, name: str) -> dict:
        """nDCG@10 and Recall@100 of the model's [CLS] vectors on the evaluation split."""
        retriever = dense_retriever(
            model_dir, name, self.work / "embedding-cache", pooling="cls", max_seq_length=self.budget.max_seq_length
        )
        return evaluate_retriever(retriever, self.test, metrics=METRICS).metrics

    def zero_shot(self, arm: Arm, seed: int) -> dict:
        model_dir = self.folder(arm, seed) / "pretrained"
        return self.store.get_or_run(
            f"{arm.key}/seed-{seed}/{ZERO_SHOT}", lambda: self.evaluate(model_dir, f"{arm.key} seed {seed}")
        )

    def few_shot(self, arm: Arm, seed: int, k: int | None) -> dict:
        """Fine-tune the arm's encoder on k training queries drawn with the seed (the same queries for every arm),
        with the budget's recipe, then evaluate it."""
        folder = self.folder(arm, seed)
        output = folder / f"finetuned-k{'all' if k is None else k}"
        budget = self.budget

        def step() -> dict:
            run_script(finetune.main, [
                "--model_name_or_path", folder / "pretrained", "--pooling", "cls", "--data_dir", self.data_dir,
                *([] if k is None else ["--max_train_queries", k]), "--seed", seed, "--output_dir", output,
                "--max_seq_length", budget.max_seq_length, "--per_device_train_batch_size", budget.finetuning_batch_size,
                "--max_steps", budget.finetuning_steps, "--learning_rate", self.finetuning_learning_rate,
                *budget.finetuning_recipe, "--eval_strategy", "no", "--report_to", "none", *self.precision,
            ])
            return self.evaluate(output, f"{arm.key} seed {seed} {few_shot_label(k)}")

        return self.store.get_or_run(f"{arm.key}/seed-{seed}/{few_shot_label(k)}", step)


def pretraining_metrics(output_dir: Path) -> dict:
    """The pre-training run's final validation metrics; cls_information is None for an arm without a decoder."""
    results = json.loads((output_dir / "all_results.json").read_text())
    return {name: results.get(f"eval_{name}") for name in PRETRAINING_METRICS}
