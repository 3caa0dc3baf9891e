"""Saving and loading: every SEED model survives a round trip; a pretraining checkpoint loads as encoder,
MLM model or pretraining model through the Auto classes (also with only its own code, via
trust_remote_code), and as a sentence-transformers dense or SPLADE model."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining
from transformers.modeling_layers import GradientCheckpointingLayer

from modeling_seed import SeedEncoderForMaskedLM, SeedEncoderForPreTraining, SeedEncoderModel
from modeling_seed.configuration_seed import AUTO_MAP


def batch_for(vocab_size: int) -> dict:
    input_ids = torch.randint(5, vocab_size, (2, 9))
    input_ids[:, 0] = 1
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    labels = torch.full_like(input_ids, -100)
    labels[:, 2:4] = input_ids[:, 2:4]
    return dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)


def outputs_of(model, batch: dict) -> dict:
    """The tensors each model class promises, computed in eval mode without gradients."""
    if isinstance(model, SeedEncoderModel):
        batch = {key: value for key, value in batch.items() if key != "labels"}
        names = ("last_hidden_state", "pooler_output")
    elif isinstance(model, SeedEncoderForMaskedLM):
        names = ("loss", "logits")
    else:
        names = ("loss", "mlm_loss", "decoder_loss", "pooler_output")
    with torch.no_grad():
        output = model.eval()(**batch)
    return {name: output[name] for name in names}


@pytest.fixture
def pretraining_checkpoint(tiny_config, tmp_path):
    """A saved tiny pretraining model and the model itself (eval mode)."""
    model = SeedEncoderForPreTraining(tiny_config()).eval()
    folder = tmp_path / "seed-checkpoint"
    model.save_pretrained(folder)
    return folder, model


@pytest.mark.parametrize("model_class", [SeedEncoderModel, SeedEncoderForMaskedLM, SeedEncoderForPreTraining])
def test_save_and_load_round_trip_gives_identical_outputs(tiny_config, tmp_path, model_class):
    model = model_class(tiny_config())
    batch = batch_for(128)
    before = outputs_of(model, batch)

    model.save_pretrained(tmp_path)
    loaded, info = model_class.from_pretrained(tmp_path, output_loading_info=True)
    after = outputs_of(loaded, batch)

    assert (info["missing_keys"], info["unexpected_keys"]) == (set(), set())
    assert before.keys() == after.keys()
    for name in before:
        assert torch.equal(before[name], after[name]), name


def test_pooler_output_is_the_last_layers_cls_state_untransformed(tiny_config):
    batch = batch_for(128)

    with torch.no_grad():
        output = SeedEncoderModel(tiny_config()).eval()(batch["input_ids"], attention_mask=batch["attention_mask"])

    assert torch.equal(output.pooler_output, output.last_hidden_state[:, 0])


def test_saved_folder_holds_the_code_and_auto_map_for_remote_loading(pretraining_checkpoint):
    folder, _ = pretraining_checkpoint
    config = json.loads((folder / "config.json").read_text())

    assert {"modeling_seed.py", "configuration_seed.py", "chunked_loss.py", "model.safetensors"} <= set(
        os.listdir(folder)
    )
    assert config["auto_map"] == AUTO_MAP
    assert config["architectures"] == ["SeedEncoderForPreTraining", "SeedEncoderForMaskedLM"]


def test_pretraining_checkpoint_loads_as_encoder_with_no_missing_or_unexpected_weights(pretraining_checkpoint):
    folder, model = pretraining_checkpoint
    batch = {key: value for key, value in batch_for(128).items() if key != "labels"}

    encoder, info = AutoModel.from_pretrained(folder, output_loading_info=True)

    assert type(encoder) is SeedEncoderModel
    assert (info["missing_keys"], info["unexpected_keys"]) == (set(), set())
    expected = outputs_of(model.bert, batch)["last_hidden_state"]
    assert torch.equal(outputs_of(encoder, batch)["last_hidden_state"], expected)


def test_pretraining_checkpoint_loads_as_masked_lm_whose_logits_are_the_mlm_heads(pretraining_checkpoint):
    folder, model = pretraining_checkpoint
    batch = batch_for(128)

    masked_lm, info = AutoModelForMaskedLM.from_pretrained(folder, output_loading_info=True)
    with torch.no_grad():
        expected_logits = model.cls(model.bert(batch["input_ids"], attention_mask=batch["attention_mask"])[0])

    assert type(masked_lm) is SeedEncoderForMaskedLM
    assert (info["missing_keys"], info["unexpected_keys"]) == (set(), set())
    assert torch.equal(outputs_of(masked_lm, batch)["logits"], expected_logits)


def test_pretraining_checkpoint_loads_as_pretraining_model_with_tied_embeddings(pretraining_checkpoint):
    folder, model = pretraining_checkpoint
    batch = batch_for(128)

    loaded, info = AutoModelForPreTraining.from_pretrained(folder, output_loading_info=True)

    assert type(loaded) is SeedEncoderForPreTraining
    assert (info["missing_keys"], info["unexpected_keys"]) == (set(), set())
    word_embeddings = loaded.bert.embeddings.word_embeddings.weight
    assert loaded.cls.predictions.decoder.weight is word_embeddings
    assert loaded.weak_decoder.embeddings.word_embeddings.weight is word_embeddings
    for name, value in outputs_of(model, batch).items():
        assert torch.equal(outputs_of(loaded, batch)[name], value), name


REMOTE_CODE_CHECK = textwrap.dedent(
    """
    import importlib.abc, sys

    class BlockModelingSeed(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "modeling_seed":
                raise ImportError("modeling_seed is blocked: SEED must come from the checkpoint's own code")

    sys.meta_path.insert(0, BlockModelingSeed())
    try:
        import modeling_seed
    except ImportError:
        pass
    else:
        sys.exit("modeling_seed is still importable; the check would prove nothing")

    import torch
    from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining

    folder, expected_path = sys.argv[1:3]
    expected = torch.load(expected_path)
    batch = expected["batch"]
    for auto_class, class_name in (
        (AutoModel, "SeedEncoderModel"),
        (AutoModelForMaskedLM, "SeedEncoderForMaskedLM"),
        (AutoModelForPreTraining, "SeedEncoderForPreTraining"),
    ):
        model = auto_class.from_pretrained(folder, trust_remote_code=True).eval()
        assert type(model).__name__ == class_name, type(model)
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        with torch.no_grad():
            if class_name == "SeedEncoderModel":
                got = model(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
                torch.testing.assert_close(got, expected["last_hidden_state"], rtol=0, atol=1e-6)
            elif class_name == "SeedEncoderForMaskedLM":
                got = model(**batch).logits
                torch.testing.assert_close(got, expected["logits"], rtol=0, atol=1e-5)
            else:
                got = model(**batch)
                torch.testing.assert_close(got.decoder_loss, expected["decoder_loss"], rtol=0, atol=1e-6)
                torch.testing.assert_close(got.mlm_loss, expected["mlm_loss"], rtol=0, atol=1e-6)
    print("remote code OK")
    """
)


def test_checkpoint_loads_with_trust_remote_code_where_modeling_seed_is_not_importable(
    pretraining_checkpoint, tmp_path
):
    folder, model = pretraining_checkpoint
    batch = batch_for(128)
    with torch.no_grad():
        output = model(**batch)
        last_hidden_state = model.bert(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    torch.save(
        dict(
            batch=batch,
            last_hidden_state=last_hidden_state,
            logits=model.cls(last_hidden_state),
            decoder_loss=output.decoder_loss,
            mlm_loss=output.mlm_loss,
        ),
        tmp_path / "expected.pt",
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HOME=str(tmp_path / "hf_home"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")

    result = subprocess.run(
        [sys.executable, "-c", REMOTE_CODE_CHECK, str(folder), str(tmp_path / "expected.pt")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    assert "remote code OK" in result.stdout


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_last_layer_only_at_cls_and_masked_positions_gives_the_full_passes_losses_and_gradients(
    tiny_config, attn_implementation
):
    # By default the last encoder layer runs where a loss reads it; asking for hidden states runs it everywhere.
    model = SeedEncoderForPreTraining(tiny_config(num_hidden_layers=3, attn_implementation=attn_implementation))
    batch = batch_for(128)
    batch["labels"][0, 5:8] = batch["input_ids"][0, 5:8]  # rows with different numbers of masked positions

    def losses_and_gradients(**extra):
        model.zero_grad()
        output = model(**batch, **extra)
        output.loss.backward()
        return output, {name: parameter.grad.clone() for name, parameter in model.named_parameters()}

    subset, subset_grads = losses_and_gradients()
    full, full_grads = losses_and_gradients(output_hidden_states=True)

    assert subset.hidden_states is None and len(full.hidden_states) == 4
    for name in ("mlm_loss", "decoder_loss", "pooler_output"):
        torch.testing.assert_close(subset[name], full[name], rtol=1e-5, atol=1e-6, msg=name)
    for name in full_grads:
        torch.testing.assert_close(subset_grads[name], full_grads[name], rtol=1e-5, atol=1e-6, msg=name)


def test_gradient_checkpointing_gives_the_same_gradients(tiny_config):
    model = SeedEncoderForPreTraining(tiny_config()).train()
    batch = batch_for(128)

    layers = [module for module in model.modules() if isinstance(module, GradientCheckpointingLayer)]
    calls = {}
    for index, layer in enumerate(layers):
        # Count the FFN's first half: the layer's own hooks sit outside the checkpoint (transformers wraps
        # `forward`), and the recompute stops early, before the layer's last sub-module returns.
        layer.intermediate.register_forward_hook(lambda *_, index=index: calls.__setitem__(index, calls[index] + 1))

    def gradients():
        calls.update(dict.fromkeys(range(len(layers)), 0))
        model.zero_grad()
        model(**batch).loss.backward()
        return {name: parameter.grad.clone() for name, parameter in model.named_parameters()}

    plain = gradients()
    plain_calls = dict(calls)
    model.activation_checkpointing_enable()  # the v5 name of gradient_checkpointing_enable
    checkpointed = gradients()

    assert len(layers) == 2 + 2  # encoder and decoder layers of the tiny config
    assert set(plain_calls.values()) == {1}
    assert set(calls.values()) == {2}  # every layer, the decoder's too, ran again in backward
    assert plain.keys() == checkpointed.keys()
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=1e-5, atol=1e-7, msg=name)


# --- sentence-transformers ---------------------------------------------------------------------------


@pytest.fixture
def bert_vocab_config(tiny_config, tokenizer):
    return tiny_config(vocab_size=len(tokenizer), max_position_embeddings=64)


TEXTS = ["The weak decoder reads the text from the [CLS] vector.", "Short one."]


def test_sentence_transformer_with_cls_pooling_embeds_text_as_the_pooler_output(
    bert_vocab_config, tokenizer, tmp_path
):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    model = SeedEncoderModel(bert_vocab_config).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    sentence_model = sentence_transformers.SentenceTransformer(
        modules=[Transformer(str(tmp_path), max_seq_length=32), Pooling(32, "cls")], device="cpu"
    )
    embeddings = sentence_model.encode(TEXTS, convert_to_tensor=True)
    with torch.no_grad():
        expected = model(**tokenizer(TEXTS, padding=True, return_tensors="pt")).pooler_output

    assert type(sentence_model[0].model) is SeedEncoderModel
    assert embeddings.shape == (2, 32)
    torch.testing.assert_close(embeddings, expected, rtol=1e-5, atol=1e-6)


def test_sparse_encoder_builds_splade_on_the_pretraining_checkpoints_mlm_head(bert_vocab_config, tokenizer, tmp_path):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    model = SeedEncoderForPreTraining(bert_vocab_config).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    sparse_model = sentence_transformers.SparseEncoder(str(tmp_path), device="cpu")
    embeddings = sparse_model.encode(TEXTS, convert_to_tensor=True).to_dense()
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model.cls(model.bert(**batch).last_hidden_state)
    expected = torch.log1p(torch.relu(logits * batch["attention_mask"][..., None])).amax(dim=1)

    transformer, pooling = list(sparse_model)
    assert transformer.transformer_task == "fill-mask"
    assert type(transformer.model) is SeedEncoderForMaskedLM
    assert type(pooling) is SpladePooling
    assert sparse_model.get_embedding_dimension() == len(tokenizer) == 30522
    assert embeddings.shape == (2, 30522)
    torch.testing.assert_close(embeddings, expected, rtol=1e-5, atol=1e-6)
