"""SPLADE encoding without the [batch, length, vocabulary] tensor: how this package runs a SparseEncoder.

sentence-transformers computes the MLM logits of every token ([batch, length, vocabulary]: about 1 GB for 32 texts
of 256 tokens with BERT's 30,522 words) and then passes over them four times in `SpladePooling` (mask, ReLU, log1p,
max). Here the encoder body and the MLM head's transform run once per batch, as there, but the vocabulary projection
is done one tile of tokens x vocabulary at a time, small enough to stay in cache, and each tile is max-pooled over its
tokens as soon as it is computed. The activation comes after the max: log(1 + ReLU(x)) is monotone, so the max of
the activations is the activation of the max. Padding positions are left out of the tiles, so they never win.

The vectors equal `SpladePooling`'s (up to fp32 rounding) and the saved model is untouched: this is how the package
runs the standard SPLADE form, Transformer(fill-mask) + SpladePooling(max). A model of another form (a Router, query
expansion, sum pooling, FA2-flattened inputs, sharded encoding inside a distributed trainer) is encoded by
sentence-transformers itself.
"""

from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Literal

import numpy as np
import torch
from scipy import sparse
from sentence_transformers import SparseEncoder
from sentence_transformers.sparse_encoder.modules import SpladePooling, Transformer
from sentence_transformers.util import batch_to_device, select_max_active_dims
from tqdm.auto import trange

# One tile of logits is TOKEN_TILE x VOCABULARY_TILE fp32 values (512 KiB: one core's L2 cache on the machine this was
# tuned on, see benchmarks/sparse_encoding.py).
TOKEN_TILE = 64
VOCABULARY_TILE = 2048
# encode_document's prompt when the model names none for "document": the first of these it has, as sentence-transformers.
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")

Task = Literal["query", "document"]


def to_csr(embeddings: torch.Tensor) -> sparse.csr_matrix:
    """A torch sparse (COO) batch of embeddings as a scipy CSR matrix, one row per text."""
    coo = embeddings.coalesce()
    rows, columns = coo.indices().numpy()
    return sparse.csr_matrix((coo.values().float().numpy(), (rows, columns)), shape=tuple(coo.shape))


def has_standard_splade_form(model: SparseEncoder) -> bool:
    """Whether `model` is Transformer(fill-mask) + SpladePooling(max) over a linear vocabulary projection, the form
    this module computes itself."""
    modules = list(model)
    if len(modules) != 2 or not isinstance(modules[0], Transformer) or type(modules[1]) is not SpladePooling:
        return False
    transformer, pooling = modules
    return (
        transformer.transformer_task == "fill-mask"
        and pooling.pooling_strategy == "max"
        and transformer.query_expansion is None
        and not transformer.can_flatten_inputs
        and isinstance(transformer.auto_model.get_output_embeddings(), torch.nn.Linear)
    )


def runs_fast(model: SparseEncoder) -> bool:
    """Whether `encode_sparse` encodes `model` itself."""
    # A distributed trainer's evaluator shards the encoding over ranks: sentence-transformers' encode does that.
    return has_standard_splade_form(model) and model._distributed_inference is None


@contextmanager
def tiled_splade_training(model: SparseEncoder):
    """While inside, `model`'s forward pass (what its training loss calls) pools with `TiledSpladeMax`: the vectors
    and gradients of `SpladePooling` without the [batch, length, vocabulary] logits, several times faster on the CPU.
    On a GPU, or for a model of another form, it changes nothing: there sentence-transformers' pooling is the fast
    one, and the tiles' Python loop would not be."""
    if model.device.type != "cpu" or not has_standard_splade_form(model):
        yield
        return
    transformer, pooling = list(model)
    projection = transformer.auto_model.get_output_embeddings()

    def pool(features: dict, **kwargs) -> dict:
        weight, bias = projection.weight, projection.bias
        # Under --bf16 autocast the projection would run in bf16: the same here, the gradient flowing back as autocast's.
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else features["token_embeddings"].dtype
        with torch.autocast("cpu", enabled=False):
            maxima = TiledSpladeMax.apply(
                features["token_embeddings"].to(dtype), features["attention_mask"], weight.to(dtype),
                None if bias is None else bias.to(dtype),
            )
            features["sentence_embedding"] = activate(maxima, pooling.activation_function)
        return features

    with _forward_replaced(pooling, pool), _vocabulary_projection_skipped(projection):
        yield


def encode_sparse(
    model: SparseEncoder, texts: list[str], task: Task, batch_size: int = 32, show_progress_bar: bool = False
) -> sparse.csr_matrix:
    """The SPLADE vectors of `texts` as `model.encode_query` (task "query") or `model.encode_document` (task
    "document") computes them, one CSR row per text, without their [batch, length, vocabulary] logits."""
    if not runs_fast(model):
        encode = model.encode_query if task == "query" else model.encode_document
        return to_csr(
            encode(
                texts, batch_size=batch_size, show_progress_bar=show_progress_bar,
                convert_to_tensor=True, convert_to_sparse_tensor=True, save_to_cpu=True,
            )
        )
    transformer, pooling = list(model)
    projection = transformer.auto_model.get_output_embeddings()
    prompt = model._resolve_prompt(None, _prompt_name(model, task))
    model.eval()
    # Longest first, as sentence-transformers batches, so that each batch pads little.
    order = np.argsort([-len(text) for text in texts], kind="stable")
    rows = []
    for start in trange(0, len(texts), batch_size, desc="Batches", disable=not show_progress_bar):
        batch = [texts[index] for index in order[start : start + batch_size]]
        features = batch_to_device(model.preprocess(batch, prompt=prompt, task=task), model.device)
        with torch.inference_mode():
            with _vocabulary_projection_skipped(projection):
                states = transformer(features)["token_embeddings"]
            maxima = max_token_logits(states, features["attention_mask"], projection.weight, projection.bias)
            vectors = activate(maxima, pooling.activation_function)
            if model.max_active_dims is not None:
                vectors = select_max_active_dims(vectors, model.max_active_dims)
        rows.append(sparse.csr_matrix(vectors.float().cpu().numpy()))
    if not rows:
        return sparse.csr_matrix((0, projection.out_features), dtype=np.float32)
    return sparse.vstack(rows, format="csr")[np.argsort(order)]


def _prompt_name(model: SparseEncoder, task: Task) -> str | None:
    """The prompt name `encode_query` / `encode_document` pick when none is given."""
    names = ("query",) if task == "query" else DOCUMENT_PROMPT_NAMES
    return next((name for name in names if name in model.prompts), None)


@contextmanager
def _vocabulary_projection_skipped(projection: torch.nn.Linear):
    """While inside, the MLM head returns the transformed token states its projection would map to the vocabulary."""
    with _forward_replaced(projection, lambda states: states):
        yield


@contextmanager
def _forward_replaced(module: torch.nn.Module, forward):
    """While inside, `module` runs `forward`; then whatever it ran before (nested uses restore each other's)."""
    previous = module.__dict__.get("forward")
    module.forward = forward
    try:
        yield
    finally:
        if previous is None:
            del module.forward
        else:
            module.forward = previous


def max_token_logits(
    states: torch.Tensor, attention_mask: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
    winners: torch.Tensor | None = None,
) -> torch.Tensor:
    """[batch, vocabulary]: per text, the max over its attended tokens of `states @ weight.T + bias`, computed one
    TOKEN_TILE x VOCABULARY_TILE tile at a time. A text with no attended token gets -inf everywhere. Given `winners`
    (a [batch, vocabulary] long tensor), the position in the sequence of each max's token is written into it (-1 for a
    text with no attended token), for the backward pass of `TiledSpladeMax`.

    A tile is too small a product to split over threads (two threads made it several times slower than one), so
    with N torch threads the texts are shared out among N workers instead, each multiplying on one thread."""
    batch_size, vocabulary = states.shape[0], weight.shape[0]
    maxima = torch.full((batch_size, vocabulary), float("-inf"), dtype=states.dtype, device=states.device)
    if winners is not None:
        winners.fill_(-1)
    # Worker threads start with gradients on; inference tensors (the encoder's) may only be written in inference mode.
    no_autograd = torch.inference_mode if states.is_inference() else torch.no_grad

    def pool_rows(rows: range) -> None:
        torch.set_num_threads(1)
        with no_autograd():
            pool_rows_without_grad(rows)

    def pool_rows_without_grad(rows: range) -> None:
        buffer = torch.empty(TOKEN_TILE * VOCABULARY_TILE, dtype=states.dtype, device=states.device)
        for row in rows:
            positions = attention_mask[row].nonzero().squeeze(1)
            tokens = states[row, positions]
            for first_word in range(0, vocabulary, VOCABULARY_TILE):
                words = slice(first_word, first_word + VOCABULARY_TILE)
                word_weight = weight[words].T
                row_maxima = maxima[row, words]
                for first_token in range(0, tokens.shape[0], TOKEN_TILE):
                    token_tile = tokens[first_token : first_token + TOKEN_TILE]
                    logits = buffer[: token_tile.shape[0] * word_weight.shape[1]].view(token_tile.shape[0], -1)
                    if bias is None:
                        torch.mm(token_tile, word_weight, out=logits)
                    else:
                        torch.addmm(bias[words], token_tile, word_weight, out=logits)
                    if winners is None:
                        torch.maximum(row_maxima, logits.amax(dim=0), out=row_maxima)
                    else:
                        tile_maxima, tile_winners = logits.max(dim=0)
                        better = tile_maxima > row_maxima
                        row_winners = winners[row, words]
                        torch.where(better, positions[first_token + tile_winners], row_winners, out=row_winners)
                        torch.where(better, tile_maxima, row_maxima, out=row_maxima)

    threads = torch.get_num_threads()
    workers = min(threads, batch_size)
    # Under OpenMP a worker's set_num_threads(1) is its own; other parallel backends share one count: restore it.
    try:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(pool_rows, [range(first, batch_size, workers) for first in range(workers)]))
    finally:
        torch.set_num_threads(threads)
    return maxima


class TiledSpladeMax(torch.autograd.Function):
    """`max_token_logits` with a gradient, for training on the CPU.

    The max over tokens passes its gradient to the one token that won, so the backward pass never needs the logits:
    word v of text b sends grad * weight[v] to its winning token's state and grad * that state to weight[v]. Only the
    words with a gradient (a positive max: ReLU is flat elsewhere) do any work, a few hundred per text in a trained
    SPLADE, where autograd through `SpladePooling` multiplies back through every token x vocabulary logit."""

    # Rows of (word, text) pairs scattered at once in the backward pass: bounds its [pairs, hidden] buffers.
    PAIRS_PER_CHUNK = 1 << 16

    @staticmethod
    def forward(ctx, states, attention_mask, weight, bias):
        winners = torch.empty(states.shape[0], weight.shape[0], dtype=torch.long, device=states.device)
        maxima = max_token_logits(states, attention_mask, weight, bias, winners=winners)
        ctx.save_for_backward(states, weight, winners)
        ctx.has_bias = bias is not None
        return maxima

    @staticmethod
    def backward(ctx, grad_maxima):
        states, weight, winners = ctx.saved_tensors
        batch_size, length, hidden = states.shape
        texts, words = ((grad_maxima != 0) & (winners >= 0)).nonzero(as_tuple=True)
        grads = grad_maxima[texts, words]
        token_rows = texts * length + winners[texts, words]  # rows of states viewed as [batch * length, hidden]
        flat_states = states.reshape(-1, hidden)
        grad_states = torch.zeros_like(flat_states) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight) if ctx.needs_input_grad[2] else None
        for first in range(0, len(grads), TiledSpladeMax.PAIRS_PER_CHUNK):
            chunk = slice(first, first + TiledSpladeMax.PAIRS_PER_CHUNK)
            chunk_grads = grads[chunk].unsqueeze(1)
            if grad_states is not None:
                grad_states.index_add_(0, token_rows[chunk], chunk_grads * weight[words[chunk]])
            if grad_weight is not None:
                grad_weight.index_add_(0, words[chunk], chunk_grads * flat_states[token_rows[chunk]])
        grad_bias = None
        if ctx.has_bias and ctx.needs_input_grad[3]:
            grad_bias = torch.zeros(weight.shape[0], dtype=grads.dtype, device=grads.device).index_add_(0, words, grads)
        return None if grad_states is None else grad_states.view_as(states), None, grad_weight, grad_bias


def activate(maxima: torch.Tensor, activation_function: str) -> torch.Tensor:
    """SpladePooling's activation of the pooled logits: log(1 + ReLU(x)), once more log1p for "log1p_relu"."""
    vectors = maxima.relu().log1p()
    return vectors.log1p() if activation_function == "log1p_relu" else vectors
