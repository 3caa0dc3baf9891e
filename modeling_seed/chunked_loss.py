"""Cross-entropy over a vocabulary projection without materialising every position's logits.

Both SEED losses end in a `hidden -> vocabulary` projection. The decoder's loss covers every
position, so plain autograd would keep batch x length x vocabulary logits (and their softmax)
alive until backward: that tensor, not the encoder, dominates time and memory of small models.
Here the logits exist one chunk of rows at a time, in one buffer that becomes the softmax and
then the gradient in place; the gradients with respect to the hidden states and the weight are
computed in the same pass and handed back in backward, so the arithmetic is the same as plain
autograd and the extra memory is one chunk.
"""

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
_LOGITS_PER_CHUNK = 2**24  # elements: 64 MiB of float32 logits per chunk


def _rows_per_chunk(vocab_size: int) -> int:
    return max(1, _LOGITS_PER_CHUNK // vocab_size)


class _FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets):
        num_rows = hidden.shape[0]
        # Under autocast the projection runs in the autocast dtype; cast the weight once, not per chunk.
        compute_dtype = F.linear(hidden[:1], weight[:1]).dtype
        compute_weight = weight.to(compute_dtype)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if weight.requires_grad else None
        grad_bias = torch.zeros_like(bias, dtype=torch.float32) if bias is not None and bias.requires_grad else None
        total_loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        step = _rows_per_chunk(weight.shape[0])
        # One float32 logits buffer, reused by every chunk and turned into the gradient in place.
        logits_buffer = torch.empty(min(step, num_rows), weight.shape[0], dtype=torch.float32, device=hidden.device)
        for start in range(0, num_rows, step):
            rows = hidden[start : start + step].to(compute_dtype)
            row_targets = targets[start : start + step]
            logits = logits_buffer[: rows.shape[0]]
            if compute_dtype == logits.dtype:
                torch.mm(rows, compute_weight.t(), out=logits)
                if bias is not None:
                    logits += bias
            else:
                logits.copy_(F.linear(rows, compute_weight, bias))
            # loss = log(sum(exp(logits - max))) + max - target logit; d(loss)/d(logits) = softmax - one_hot.
            target_logits = logits.gather(1, row_targets[:, None]).squeeze(1)
            max_logits = logits.amax(dim=1)
            probabilities = logits.sub_(max_logits[:, None]).exp_()
            normalizers = probabilities.sum(dim=1)
            probabilities /= normalizers[:, None]
            total_loss += (normalizers.log() + max_logits - target_logits).sum()
            grad_logits = probabilities
            grad_logits[torch.arange(len(row_targets), device=hidden.device), row_targets] -= 1.0
            # The 1/num_rows of the mean goes on the (rows x hidden) factors, not on this (rows x vocabulary) tensor.
            if grad_bias is not None:
                grad_bias += grad_logits.sum(0) / num_rows
            grad_logits = grad_logits.to(compute_dtype)
            grad_hidden[start : start + step] = grad_logits @ compute_weight
            if grad_weight is None:
                continue
            if compute_dtype == grad_weight.dtype:
                grad_weight.addmm_(grad_logits.t(), rows, alpha=1.0 / num_rows)
            else:  # a low-precision product, accumulated in float32
                grad_weight += (grad_logits.t() @ (rows / num_rows)).float()
        grad_hidden /= num_rows
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.parameter_dtypes = (weight.dtype, None if bias is None else bias.dtype)
        ctx.gradients_handed_out = False
        return total_loss / num_rows

    @staticmethod
    def backward(ctx, grad_loss):
        # The gradients were computed in forward and are scaled in place here, so no second
        # vocabulary x hidden copy exists while autograd accumulates them: they can be handed out once.
        if ctx.gradients_handed_out:
            raise RuntimeError(
                "linear_cross_entropy: backward reached the same loss twice (retain_graph=True). Its gradients "
                "are computed in forward and handed out once; compute the loss again for a second backward."
            )
        ctx.gradients_handed_out = True
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        weight_dtype, bias_dtype = ctx.parameter_dtypes
        return (
            grad_hidden.mul_(grad_loss.to(grad_hidden.dtype)),
            None if grad_weight is None else grad_weight.mul_(grad_loss).to(weight_dtype),
            None if grad_bias is None else grad_bias.mul_(grad_loss).to(bias_dtype),
            None,
        )


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    bias: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """`F.cross_entropy(F.linear(hidden, weight, bias), targets, ignore_index=-100)`, in chunks.

    hidden: (..., hidden_size); targets: (...) with -100 where there is no target.
    `reduction="mean"` averages over the positions that have a target (0 when none has).
    `reduction="none"` returns a per-position loss shaped like `targets`, 0 where ignored.
    The mean's gradients are computed in forward, so one backward may run through it
    (`retain_graph=True` and a second backward raise).
    """
    if reduction == "none":
        flat_hidden, flat_targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
        step = _rows_per_chunk(weight.shape[0])
        losses = [
            F.cross_entropy(
                F.linear(flat_hidden[start : start + step], weight, bias).float(),
                flat_targets[start : start + step],
                ignore_index=IGNORE_INDEX,
                reduction="none",
            )
            for start in range(0, flat_targets.numel(), step)
        ]
        return torch.cat(losses).view_as(targets)
    if reduction != "mean":
        raise ValueError(f"linear_cross_entropy: reduction must be 'mean' or 'none', got {reduction!r}.")
    has_target = targets != IGNORE_INDEX
    if not has_target.any():
        return hidden.sum() * 0.0
    return _FusedLinearCrossEntropy.apply(hidden[has_target], weight, bias, targets[has_target])
