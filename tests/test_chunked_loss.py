"""linear_cross_entropy is F.cross_entropy(F.linear(...), ignore_index=-100), value and gradients, while
holding only one chunk of logits at a time."""


import pytest
import torch
import torch.nn.functional as F

from modeling_seed import linear_cross_entropy

# The package re-exports the function under the module's own name, so `import ... as` would give the function.
from modeling_seed import chunked_loss as lce

VOCAB, HIDDEN = 11, 8


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 4 rows, so the test inputs below span several chunks and a ragged last one."""
    monkeypatch.setattr(lce, "_LOGITS_PER_CHUNK", 4 * VOCAB)
    assert lce._rows_per_chunk(VOCAB) == 4


def inputs(shape=(3, 9), with_bias=True, dtype=torch.float32):
    hidden = torch.randn(*shape, HIDDEN, dtype=dtype, requires_grad=True)
    weight = torch.randn(VOCAB, HIDDEN, dtype=dtype, requires_grad=True)
    bias = torch.randn(VOCAB, dtype=dtype, requires_grad=True) if with_bias else None
    targets = torch.randint(0, VOCAB, shape)
    targets[0, :4] = -100
    targets[2, 5] = -100
    return hidden, weight, bias, targets


def reference(hidden, weight, bias, targets, reduction="mean"):
    logits = F.linear(hidden, weight, bias).float()
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-100, reduction=reduction)


def gradients(loss, *tensors):
    return torch.autograd.grad(loss, [tensor for tensor in tensors if tensor is not None])


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
def test_mean_loss_and_gradients_match_plain_cross_entropy_over_several_chunks(small_chunks, with_bias):
    hidden, weight, bias, targets = inputs(with_bias=with_bias)
    assert (targets != -100).sum() > 4 * 3  # more rows with a target than three chunks hold

    fused = linear_cross_entropy(hidden, weight, targets, bias=bias)
    expected = reference(hidden, weight, bias, targets)

    torch.testing.assert_close(fused, expected, rtol=1e-5, atol=1e-6)
    for got, want in zip(gradients(fused, hidden, weight, bias), gradients(expected, hidden, weight, bias)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_gradient_at_ignored_positions_is_zero(small_chunks):
    hidden, weight, bias, targets = inputs()

    (grad_hidden,) = gradients(linear_cross_entropy(hidden, weight, targets, bias=bias), hidden)

    assert torch.equal(grad_hidden[targets == -100], torch.zeros_like(grad_hidden[targets == -100]))
    assert (grad_hidden[targets != -100].abs().sum(-1) > 0).all()


def test_upstream_gradient_scales_every_gradient(small_chunks):
    hidden, weight, bias, targets = inputs()

    once = gradients(linear_cross_entropy(hidden, weight, targets, bias=bias), hidden, weight, bias)
    tripled = gradients(3.0 * linear_cross_entropy(hidden, weight, targets, bias=bias), hidden, weight, bias)

    for one, three in zip(once, tripled):
        torch.testing.assert_close(three, 3.0 * one)


def test_frozen_weight_gets_no_gradient_and_hidden_gradient_is_unchanged(small_chunks):
    hidden, weight, bias, targets = inputs()
    frozen_weight = weight.detach()

    loss = linear_cross_entropy(hidden, frozen_weight, targets, bias=bias)
    (grad_hidden,) = gradients(loss, hidden)
    (expected_grad,) = gradients(reference(hidden, frozen_weight, bias, targets), hidden)

    torch.testing.assert_close(grad_hidden, expected_grad, rtol=1e-5, atol=1e-6)


def test_reduction_none_gives_each_positions_loss_and_zero_where_ignored(small_chunks):
    hidden, weight, bias, targets = inputs()

    per_position = linear_cross_entropy(hidden, weight, targets, bias=bias, reduction="none")

    assert per_position.shape == targets.shape
    assert torch.equal(per_position[targets == -100], torch.zeros(int((targets == -100).sum())))
    torch.testing.assert_close(
        per_position, reference(hidden, weight, bias, targets, reduction="none").view_as(targets), rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(
        per_position.sum() / (targets != -100).sum(), linear_cross_entropy(hidden, weight, targets, bias=bias)
    )


def test_all_ignored_targets_give_zero_loss_and_zero_gradient():
    hidden, weight, bias, _ = inputs()
    targets = torch.full((3, 9), -100)

    loss = linear_cross_entropy(hidden, weight, targets, bias=bias)
    loss.backward()

    assert loss.item() == 0.0
    assert torch.equal(hidden.grad, torch.zeros_like(hidden))
    for parameter in (weight, bias):
        assert parameter.grad is None or not parameter.grad.any()


def test_unknown_reduction_is_rejected_with_the_allowed_values():
    hidden, weight, bias, targets = inputs()

    with pytest.raises(ValueError, match="reduction must be 'mean' or 'none', got 'sum'"):
        linear_cross_entropy(hidden, weight, targets, reduction="sum")


def test_bfloat16_autocast_loss_and_gradients_stay_close_to_float32(small_chunks):
    hidden, weight, bias, targets = inputs()
    full = linear_cross_entropy(hidden, weight, targets, bias=bias)
    full_grads = gradients(full, hidden, weight, bias)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = linear_cross_entropy(hidden, weight, targets, bias=bias)
    low_grads = gradients(low, hidden, weight, bias)

    assert low.dtype == torch.float32
    torch.testing.assert_close(low, full, rtol=2e-2, atol=0)
    for got, want in zip(low_grads, full_grads):
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=5e-2, atol=2e-3)


def test_second_backward_through_the_same_loss_is_refused_with_a_clear_message(small_chunks):
    hidden, weight, bias, targets = inputs()
    loss = linear_cross_entropy(hidden, weight, targets, bias=bias)
    loss.backward(retain_graph=True)

    with pytest.raises(RuntimeError, match="handed out once; compute the loss again"):
        loss.backward()
