"""The weak decoder, as the paper specifies it: it rebuilds the original text from the [CLS] vector
alone, each position sees only the previous `decoder_attention_span` tokens (plus the start position),
and its loss reaches the encoder through [CLS] and nowhere else."""

import pytest
import torch
import torch.nn.functional as F

from modeling_seed import SeedEncoderForPreTraining, SeedWeakDecoder, decoder_attention_mask, span_limited_attention

LENGTH = 10
ATTENTION_IMPLEMENTATIONS = ["eager", "sdpa"]


def weak_decoder(tiny_config, **overrides) -> SeedWeakDecoder:
    # A wide init makes every visible token move the output well above rounding noise, even through
    # several layers, so "unchanged" (exactly 0) and "changed" cannot be confused.
    return SeedWeakDecoder(tiny_config(initializer_range=0.2, **overrides)).eval()


def random_ids(vocab_size: int, length: int = LENGTH, batch: int = 1) -> torch.Tensor:
    return torch.randint(5, vocab_size, (batch, length))


def positions_changed_by_editing(decoder: SeedWeakDecoder, ids: torch.Tensor, token_index: int) -> list[int]:
    """Decoder positions whose last hidden state differs at all once original token `token_index` is replaced."""
    cls_vector = torch.randn(1, decoder.embeddings.word_embeddings.embedding_dim)
    edited = ids.clone()
    edited[0, token_index] = 5 + (ids[0, token_index] - 5 + 1) % (decoder.embeddings.word_embeddings.num_embeddings - 5)
    with torch.no_grad():
        before = decoder(cls_vector, ids).last_hidden_state[0]
        after = decoder(cls_vector, edited).last_hidden_state[0]
    return [position for position in range(ids.shape[1]) if not torch.equal(before[position], after[position])]


def test_decoder_attention_mask_with_span_two_sees_previous_position_itself_and_start():
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0],
            [1, 0, 1, 1, 0],
            [1, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )

    assert torch.equal(decoder_attention_mask(5, span=2), expected)


def test_decoder_attention_mask_with_span_one_sees_only_itself_and_start():
    expected = torch.eye(6, dtype=torch.bool)
    expected[:, 0] = True

    assert torch.equal(decoder_attention_mask(6, span=1), expected)


def test_decoder_attention_mask_without_span_is_plain_causal():
    assert torch.equal(decoder_attention_mask(6, span=None), torch.ones(6, 6, dtype=torch.bool).tril())


@pytest.mark.parametrize("span", [1, 2, 3, 5])
def test_span_limited_attention_equals_dense_attention_under_the_span_mask_values_and_gradients(span):
    query, key, value = (torch.randn(2, 3, 12, 4, requires_grad=True) for _ in range(3))
    key_is_real = torch.ones(2, 12, dtype=torch.bool)
    key_is_real[1, 8:] = False  # padding at the end of the second row
    visible = decoder_attention_mask(12, span)[None, None] & key_is_real[:, None, None, :]

    banded = span_limited_attention(query, key, value, key_is_real, span, scaling=0.5)
    dense = F.scaled_dot_product_attention(query, key, value, attn_mask=visible, scale=0.5)

    torch.testing.assert_close(banded, dense, rtol=1e-5, atol=1e-6)
    upstream = torch.randn_like(dense)
    banded_grads = torch.autograd.grad(banded, (query, key, value), upstream)
    dense_grads = torch.autograd.grad(dense, (query, key, value), upstream)
    for got, want in zip(banded_grads, dense_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_decoder_takes_the_span_limited_path_for_short_spans_with_the_dense_paths_outputs(tiny_config):
    decoder = weak_decoder(tiny_config, decoder_num_layers=2, decoder_attention_span=2)
    ids = random_ids(128, length=24, batch=2)
    attention_mask = torch.ones_like(ids)
    attention_mask[1, 17:] = 0
    cls_vectors = torch.randn(2, decoder.embeddings.word_embeddings.embedding_dim)

    assert decoder.uses_span_limited_attention(24)
    span_limited = decoder(cls_vectors, ids, attention_mask)
    decoder.uses_span_limited_attention = lambda length: False  # force the dense-mask path on the same weights
    dense = decoder(cls_vectors, ids, attention_mask)

    torch.testing.assert_close(span_limited.loss, dense.loss, rtol=1e-5, atol=1e-6)
    real = attention_mask.bool()
    torch.testing.assert_close(span_limited.last_hidden_state[real], dense.last_hidden_state[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attn_implementation", ATTENTION_IMPLEMENTATIONS)
def test_decoder_position_sees_two_previous_tokens_but_not_token_three_back(tiny_config, attn_implementation):
    # Position i predicts token i from its input (token i-1) and, with span 2, position i-1 (token i-2).
    decoder = weak_decoder(
        tiny_config, decoder_num_layers=1, decoder_attention_span=2, attn_implementation=attn_implementation
    )

    changed = positions_changed_by_editing(decoder, random_ids(128), token_index=3)

    assert changed == [4, 5]  # token 3 is token i-1 of position 4 and token i-2 of position 5, token i-3 of 6


@pytest.mark.parametrize("num_layers", [2, 3])
def test_each_extra_decoder_layer_widens_the_window_by_span_minus_one(tiny_config, num_layers):
    # The span restricts each layer's attention; stacked layers chain it (like sliding-window attention).
    decoder = weak_decoder(tiny_config, decoder_num_layers=num_layers, decoder_attention_span=2)

    changed = positions_changed_by_editing(decoder, random_ids(128), token_index=3)

    assert changed == list(range(4, 4 + num_layers + 1))


@pytest.mark.parametrize("attn_implementation", ATTENTION_IMPLEMENTATIONS)
def test_full_causal_decoder_sees_every_earlier_token_and_no_later_one(tiny_config, attn_implementation):
    decoder = weak_decoder(
        tiny_config, decoder_num_layers=1, decoder_attention_span=None, attn_implementation=attn_implementation
    )

    changed = positions_changed_by_editing(decoder, random_ids(128), token_index=2)

    assert changed == list(range(3, LENGTH))


@pytest.mark.parametrize("attn_implementation", ATTENTION_IMPLEMENTATIONS)
def test_start_position_is_visible_from_every_position(tiny_config, attn_implementation):
    decoder = weak_decoder(
        tiny_config, decoder_num_layers=1, decoder_attention_span=1, attn_implementation=attn_implementation
    )
    ids = random_ids(128)
    cls_vector = torch.randn(1, 32)

    original_start = decoder.start_token_id
    with torch.no_grad():
        before = decoder(cls_vector, ids).last_hidden_state[0]
        decoder.start_token_id = original_start + 7
        after = decoder(cls_vector, ids).last_hidden_state[0]

    changed = [position for position in range(LENGTH) if not torch.equal(before[position], after[position])]
    assert changed == list(range(LENGTH))
    # ...while with span 1 an ordinary token is seen by its own position only.
    decoder.start_token_id = original_start
    assert positions_changed_by_editing(decoder, ids, token_index=4) == [5]


def test_cls_vector_reaches_every_decoder_position(tiny_config):
    decoder = weak_decoder(tiny_config)
    ids = random_ids(128)

    with torch.no_grad():
        before = decoder(torch.randn(1, 32), ids).last_hidden_state[0]
        after = decoder(torch.randn(1, 32), ids).last_hidden_state[0]

    assert ((before - after).abs().amax(-1) > 1e-3).all()


def test_padding_leaves_the_real_positions_unchanged(tiny_config):
    decoder = weak_decoder(tiny_config)
    cls_vector = torch.randn(1, 32)
    ids = random_ids(128, length=6)
    padded = torch.cat([ids, torch.randint(5, 128, (1, 4))], dim=1)
    mask = torch.tensor([[1] * 6 + [0] * 4])

    with torch.no_grad():
        alone = decoder(cls_vector, ids).last_hidden_state
        with_padding = decoder(cls_vector, padded, attention_mask=mask).last_hidden_state

    torch.testing.assert_close(with_padding[:, :6], alone, atol=1e-6, rtol=0)


def test_token_losses_are_cross_entropy_of_each_original_token_zero_at_padding(tiny_config):
    decoder = weak_decoder(tiny_config)
    cls_vectors = torch.randn(2, 32)
    ids = random_ids(128, length=8, batch=2)
    mask = torch.tensor([[1] * 8, [1] * 5 + [0] * 3])

    with torch.no_grad():
        output = decoder(cls_vectors, ids, attention_mask=mask, return_token_losses=True)
    logits = output.last_hidden_state @ decoder.embeddings.word_embeddings.weight.T
    expected = F.cross_entropy(logits.transpose(1, 2), ids, reduction="none") * mask

    assert output.token_losses.shape == (2, 8)
    assert torch.equal(output.token_losses[1, 5:], torch.zeros(3))
    torch.testing.assert_close(output.token_losses, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(output.loss, output.token_losses.sum() / mask.sum(), atol=1e-6, rtol=1e-6)


def test_token_losses_are_not_computed_unless_asked(tiny_config):
    output = weak_decoder(tiny_config)(torch.randn(1, 32), random_ids(128))

    assert output.token_losses is None


# --- inside SeedEncoderForPreTraining ---------------------------------------------------------------


def pretraining_batch(vocab_size: int = 128, batch: int = 2, length: int = 12) -> dict:
    unmasked = random_ids(vocab_size, length=length, batch=batch)
    unmasked[:, 0] = 1  # a stand-in [CLS]
    labels = torch.full_like(unmasked, -100)
    labels[:, 3:6] = unmasked[:, 3:6]
    input_ids = unmasked.clone()
    input_ids[:, 3:6] = 4  # a stand-in [MASK]
    return dict(
        input_ids=input_ids, attention_mask=torch.ones_like(unmasked), labels=labels, unmasked_input_ids=unmasked
    )


def test_decoder_loss_ignores_every_encoder_state_except_cls(tiny_config):
    model = SeedEncoderForPreTraining(tiny_config()).eval()
    batch = pretraining_batch()

    def shift_all_but_cls(module, args, output):
        shifted = output.last_hidden_state.clone()
        shifted[:, 1:] += 1.0
        return type(output)(last_hidden_state=shifted, pooler_output=output.pooler_output)

    # output_hidden_states makes the model take the encoder's full forward, the output the hook perturbs;
    # the default training path computes the same losses (test_modeling pins that down).
    with torch.no_grad():
        plain = model(**batch, output_hidden_states=True)
        handle = model.bert.register_forward_hook(shift_all_but_cls)
        shifted = model(**batch, output_hidden_states=True)
        handle.remove()

    assert torch.equal(shifted.decoder_loss, plain.decoder_loss)
    assert abs(shifted.mlm_loss - plain.mlm_loss) > 1e-3  # the shift was real: the MLM head saw it


def test_reconstruction_gradient_reaches_the_encoder_only_through_cls(tiny_config):
    model = SeedEncoderForPreTraining(tiny_config())
    batch = pretraining_batch()
    batch["labels"] = torch.full_like(batch["labels"], -100)  # no masked tokens: the loss is reconstruction only
    kept = {}

    def keep_encoder_output(module, args, output):
        output.last_hidden_state.retain_grad()
        kept["states"] = output.last_hidden_state

    model.bert.register_forward_hook(keep_encoder_output)
    output = model(**batch, output_hidden_states=True)  # the full encoder pass, whose output the hook keeps
    output.loss.backward()

    state_grad = kept["states"].grad
    assert output.mlm_loss == 0.0
    assert (state_grad[:, 0].abs().sum(-1) > 0).all()
    assert torch.equal(state_grad[:, 1:], torch.zeros_like(state_grad[:, 1:]))
    for layer in model.bert.encoder.layer:
        assert layer.attention.self.query.weight.grad.abs().sum() > 0
        assert layer.output.dense.weight.grad.abs().sum() > 0
    assert not model.cls.predictions.transform.dense.weight.grad.any()


def test_loss_is_mlm_plus_lambda_times_reconstruction(tiny_config):
    model = SeedEncoderForPreTraining(tiny_config(decoder_loss_weight=0.25)).eval()

    with torch.no_grad():
        output = model(**pretraining_batch())

    torch.testing.assert_close(output.loss, output.mlm_loss + 0.25 * output.decoder_loss)
    assert output.decoder_loss > 0 and output.mlm_loss > 0


def test_decoder_target_defaults_to_the_input_with_masked_positions_restored(tiny_config):
    model = SeedEncoderForPreTraining(tiny_config()).eval()
    batch = pretraining_batch()

    with torch.no_grad():
        explicit = model(**batch)
        rebuilt = model(**{key: value for key, value in batch.items() if key != "unmasked_input_ids"})

    assert torch.equal(rebuilt.decoder_loss, explicit.decoder_loss)


def test_decoder_rebuilds_the_unmasked_input_not_the_masked_one(tiny_config):
    model = SeedEncoderForPreTraining(tiny_config()).eval()
    batch = pretraining_batch()
    assert not torch.equal(batch["input_ids"], batch["unmasked_input_ids"])

    with torch.no_grad():
        output = model(**batch)
        cls_vectors, mask = output.pooler_output, batch["attention_mask"]
        loss_on_unmasked = model.weak_decoder(cls_vectors, batch["unmasked_input_ids"], mask).loss
        loss_on_masked = model.weak_decoder(cls_vectors, batch["input_ids"], mask).loss

    torch.testing.assert_close(output.decoder_loss, loss_on_unmasked, rtol=0, atol=1e-6)
    assert (output.decoder_loss - loss_on_masked).abs() > 1e-3


def test_zero_lambda_builds_no_decoder_and_keeps_the_same_mlm_loss(tiny_config):
    full = SeedEncoderForPreTraining(tiny_config()).eval()
    baseline = SeedEncoderForPreTraining(tiny_config(decoder_loss_weight=0)).eval()
    load = baseline.load_state_dict(full.state_dict(), strict=False)
    batch = pretraining_batch()

    with torch.no_grad():
        full_output = full(**batch)
        baseline_output = baseline(**batch)

    assert baseline.weak_decoder is None
    assert load.missing_keys == []
    assert load.unexpected_keys and all(key.startswith("weak_decoder.") for key in load.unexpected_keys)
    assert baseline_output.decoder_loss is None
    assert torch.equal(baseline_output.loss, baseline_output.mlm_loss)
    assert torch.equal(baseline_output.mlm_loss, full_output.mlm_loss)


def test_after_a_short_overfit_the_decoder_reads_the_text_from_its_own_cls(tiny_config):
    model = SeedEncoderForPreTraining(tiny_config())
    ids = random_ids(128, length=10, batch=4)
    ids[:, 0] = 1
    batch = dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=torch.full_like(ids, -100))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()

    model.eval()
    with torch.no_grad():
        cls_vectors = model(**batch).pooler_output
        own = model.weak_decoder(cls_vectors, ids).loss
        others = model.weak_decoder(cls_vectors.roll(1, dims=0), ids).loss

    assert own < 0.5 * others, (own, others)


def test_decoder_follows_the_models_attention_implementation_with_the_same_outputs(tiny_config):
    model = SeedEncoderForPreTraining(tiny_config()).eval()
    batch = pretraining_batch()
    with torch.no_grad():
        sdpa = model(**batch)
        model.set_attn_implementation("eager")
        eager = model(**batch)

    for layer in model.weak_decoder.layer:
        assert layer.attention.self.config._attn_implementation == "eager"
    torch.testing.assert_close(eager.decoder_loss, sdpa.decoder_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(eager.mlm_loss, sdpa.mlm_loss, rtol=1e-5, atol=1e-6)


def test_attention_to_the_single_cls_key_equals_bert_cross_attention_whatever_its_query_and_key(tiny_config):
    # SeedClsContext skips the query and key projections: with one key, softmax gives it weight 1.
    from transformers.models.bert.modeling_bert import BertAttention

    from modeling_seed.modeling_seed import SeedClsContext

    config = tiny_config().decoder_layer_config()
    config._attn_implementation = "eager"
    bert_cross_attention = BertAttention(config, is_cross_attention=True).eval()
    cls_context = SeedClsContext(config).eval()
    cls_context.value.load_state_dict(bert_cross_attention.self.value.state_dict())
    cls_context.dense.load_state_dict(bert_cross_attention.output.dense.state_dict())
    cls_context.LayerNorm.load_state_dict(bert_cross_attention.output.LayerNorm.state_dict())
    hidden_states, cls_vectors = torch.randn(3, 7, config.hidden_size), torch.randn(3, config.hidden_size)

    with torch.no_grad():
        expected, _ = bert_cross_attention(hidden_states, encoder_hidden_states=cls_vectors[:, None, :])
        actual = cls_context(hidden_states, cls_vectors)

    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)
