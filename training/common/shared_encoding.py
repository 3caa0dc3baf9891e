"""Work that the main process of a distributed run does alone, with every encoding in it shared by all processes.

Fine-tuning's evaluations, mining and teacher scoring search, score and write files on the main process, so that
there is one ranking and one set of files; encoding on one device while the others wait took N times too long,
and at MS MARCO's size (8.8M passages) longer than a collective's 30-minute timeout. In `SharedEncoding.run`,
each `encode` (or CrossEncoder `predict`) the main process makes with one of the work's models is split into one
contiguous, balanced slice per process; every process encodes its own slice, and the vectors are gathered, on the
CPU, to the main process in the original order. The other processes serve those requests until the work ends.

This is the protocol of sentence-transformers' own distributed evaluation (`util.distributed`, which its trainers
use for an evaluator called during training): the main process hands each model a `_distributed_inference`, the
hook its `encode` calls, and every process runs the model's `_inference` on its slice. Here it serves several models
at once (the student and its teachers), counts what each process encoded, and waits on a group of its own, sized
for the main process's work between two encodings.
"""

import datetime
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")
# How long the other processes wait for the main process's next request. Between two encodings it may run BM25 over
# MS MARCO's 500k training queries or search its 8.8M passages: hours, not the 30 minutes of the default group. A
# failure on the main process ends the wait at once (its error is sent); a main process that dies ends it through the
# launcher, which stops the other processes.
MAIN_PROCESS_WORK_TIMEOUT = datetime.timedelta(hours=12)
STOP, ENCODE = "stop", "encode"
# Texts a process encodes per request: its vectors reach the main process in messages of at most this many (200 MB at
# 768 float32 dimensions), not in one message of its whole share (1.7 GB at 384 dimensions for MS MARCO on 8 GPUs,
# pickled beside the copy it is made from).
MAX_TEXTS_PER_PROCESS = 65_536


def slice_bounds(count: int, processes: int) -> list[tuple[int, int]]:
    """(start, end) of each process's contiguous slice of `count` texts, in rank order: they cover every text once,
    and their sizes differ by one at most (the first processes take the remainder)."""
    size, remainder = divmod(count, processes)
    bounds, start = [], 0
    for rank in range(processes):
        end = start + size + (rank < remainder)
        bounds.append((start, end))
        start = end
    return bounds


def request_rounds(count: int, processes: int, per_process: int = MAX_TEXTS_PER_PROCESS) -> list[list[tuple[int, int]]]:
    """The (start, end) of each process's slice in each round of requests: consecutive chunks of at most
    `per_process` texts a process, each split by `slice_bounds`; together they cover every text once, in order."""
    rounds, chunk = [], per_process * processes
    for chunk_start in range(0, count, chunk):
        size = min(chunk, count - chunk_start)
        rounds.append([(chunk_start + start, chunk_start + end) for start, end in slice_bounds(size, processes)])
    return rounds


def rank_and_processes() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def on_cpu(value):
    """`value` (a tensor, or lists and dicts of them) with its tensors on the CPU, to be pickled for another process."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, list):
        return [on_cpu(item) for item in value]
    if isinstance(value, dict):
        return {key: on_cpu(item) for key, item in value.items()}
    return value


def concatenated(outputs: list):
    """The slices' outputs as one, in rank order: tensors (dense or sparse) stacked row-wise, lists joined."""
    if isinstance(outputs[0], torch.Tensor):
        return torch.cat(outputs)
    return [item for output in outputs for item in output]


class SharedEncoding:
    """Runs work on the main process with its models' encodings shared (`run`), and keeps, for each named phase, how
    many texts this process encoded in each of the phase's shared encodings. Used as a context manager, it lets go of
    its process group at the end: left to the interpreter's exit, the group aborted a process that had finished its
    work ("terminate called without an active exception") in 2 of 13 two-process runs, and in none of 15 since."""

    def __init__(self):
        self.encoded: dict[str, list[int]] = {}  # phase -> texts this process encoded, one entry per encoding
        self._group = None

    def __enter__(self) -> "SharedEncoding":
        return self

    def __exit__(self, *exception) -> None:
        if self._group is not None:
            dist.destroy_process_group(self._group)
            self._group = None

    def run(self, phase: str, models: list, work: Callable[[], T]) -> T:
        """`work()`, run by the main process, its result returned on every process. `models` (sentence-transformers
        models: the same ones, in the same order, on every process) encode in it on every process; any other model
        encodes on the main process alone. In one process the work runs as it would alone, and nothing is counted: the
        models are left as they are (`encode_sparse` keeps its own fast path only for a model without the hook)."""
        rank, processes = rank_and_processes()
        if processes == 1:
            return work()
        group, counts = self._requests(), self.encoded.setdefault(phase, [])
        result = [self._lead(group, models, counts, work) if rank == 0 else serve(group, models, counts)]
        with torch.inference_mode(False):
            dist.broadcast_object_list(result, src=0, group=group)
        return result[0]

    def per_process(self) -> dict[str, list[list[int]]]:
        """{phase: one [texts encoded by process 0, by process 1, ...] per shared encoding}, for the phases that
        encoded anything; empty in one process. Every process calls it (it gathers their counts), and each receives
        the whole table."""
        _, processes = rank_and_processes()
        if processes == 1:
            return {}
        tables = [None] * processes
        with torch.inference_mode(False):
            dist.all_gather_object(tables, self.encoded, group=self._requests())
        # Every process takes part in every shared encoding, so their lists line up entry by entry.
        return {
            phase: [list(shares) for shares in zip(*(table[phase] for table in tables))]
            for phase, counts in self.encoded.items()
            if counts
        }

    def _requests(self):
        """The group the requests travel on, made by the first shared work, on every process at once: gloo, so that
        requests and vectors stay on the CPU whatever the training backend, with MAIN_PROCESS_WORK_TIMEOUT."""
        if self._group is None:
            self._group = dist.new_group(backend="gloo", timeout=MAIN_PROCESS_WORK_TIMEOUT)
        return self._group

    @staticmethod
    def _lead(group, models: list, counts: list[int], work: Callable[[], T]) -> T:
        previous = [model._distributed_inference for model in models]
        for index, model in enumerate(models):
            model._distributed_inference = SharedInference(group, models, index, counts)
        error = None
        try:
            return work()
        except BaseException:
            error = traceback.format_exc()
            raise
        finally:
            for model, hook in zip(models, previous):
                model._distributed_inference = hook
            scatter(group, [(STOP, error)] * dist.get_world_size())


class SharedInference:
    """The hook `encode` calls on the main process: the inputs split by `request_rounds`, each process's slice encoded
    by its copy of `models[index]`, the outputs gathered in order, a round at a time."""

    def __init__(self, group, models: list, index: int, counts: list[int]):
        self.group, self.models, self.index, self.counts = group, models, index, counts

    def __call__(self, inputs: list, **kwargs) -> Any:
        model = self.models[self.index]
        if not inputs:
            return model._inference(inputs, **kwargs)
        quiet = {**kwargs, "show_progress_bar": False}  # the main process shows its own slice's progress
        outputs, errors = [], []
        for number, bounds in enumerate(request_rounds(len(inputs), dist.get_world_size())):
            requests = [
                (ENCODE, (self.index, inputs[start:end], kwargs if rank == 0 else quiet, number > 0))
                for rank, (start, end) in enumerate(bounds)
            ]
            _, own = scatter(self.group, requests)
            for rank, (output, error) in enumerate(encode_slice(self.group, self.models, own, self.counts)):
                if error is not None:
                    errors.append(f"process {rank}:\n{error}")
                elif output is not None:
                    outputs.append(output)
            if errors:
                raise RuntimeError("Encoding a slice of the inputs failed on " + "\n".join(errors))
        output = concatenated(outputs)
        if isinstance(output, torch.Tensor) and not kwargs.get("save_to_cpu") and model.device.type != "cpu":
            output = output.to(model.device)
        return output


def scatter(group, requests: list | None = None) -> tuple[str, Any]:
    """The main process sends each process its request (the main process's own is returned to it); another process
    waits for its own."""
    received = [None]
    with torch.inference_mode(False):
        dist.scatter_object_list(received, requests, src=0, group=group)
    return received[0]


def encode_slice(group, models: list, request: tuple, counts: list[int]) -> list | None:
    """This process's slice encoded and sent to the main process, which receives every process's (output, error). A
    request that continues an encoding (its later rounds) adds to that encoding's count."""
    index, inputs, kwargs, continued = request
    if continued:
        counts[-1] += len(inputs)
    else:
        counts.append(len(inputs))
    try:
        result = (on_cpu(models[index]._inference(inputs, **kwargs)) if inputs else None, None)
    except Exception:
        result = (None, traceback.format_exc())
    rank, processes = rank_and_processes()
    gathered = [None] * processes if rank == 0 else None
    with torch.inference_mode(False):
        dist.gather_object(result, gathered, dst=0, group=group)
    return gathered


def serve(group, models: list, counts: list[int]) -> None:
    """On a process other than the main one: encode the slices the main process sends until it says the work ended;
    its error, if it failed, is raised here too."""
    while True:
        command, payload = scatter(group)
        if command == STOP:
            if payload is not None:
                raise RuntimeError(f"The main process failed in work whose encodings this process shared:\n{payload}")
            return None
        encode_slice(group, models, payload, counts)
