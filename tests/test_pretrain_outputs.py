"""What a pretraining run leaves behind, and the ways of giving it data and options.

The output folder is a Hub-ready model: it loads with the Auto classes (with the library or with
`trust_remote_code=True`), as a sentence-transformers model, and carries a model card with
metadata, the final losses and a loss plot. Runs are tiny and on real text from ../shared/data.
"""

import json
import subprocess
import sys

import pytest
import torch
import yaml
from datasets import Dataset
from huggingface_hub import ModelCard
from PIL import Image
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining, AutoTokenizer

import modeling_seed
from pretrain_helpers import TINY_MODEL, TINY_RUN, pretrain, subprocess_env, weights, write_lines


def trainer_log(checkpoint) -> list[dict]:
    return json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]


def card_text(folder) -> str:
    return (folder / "README.md").read_text()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, pretrain_lines):
    """300 lines of real English prose, one passage per line."""
    return write_lines(tmp_path_factory.mktemp("corpus") / "prose.txt", pretrain_lines(300))


@pytest.fixture(scope="module")
def run(corpus, tmp_path_factory):
    """A 6-step run on `corpus` holding out 10% for evaluation, evaluated and saved every 3 steps, its tokenizer
    learnt from 200 of the 300 passages."""
    out = tmp_path_factory.mktemp("run") / "seed-prose"
    status = pretrain([
        "--train_file", corpus, "--output_dir", out, *TINY_RUN, "--max_train_samples", "300",
        "--tokenizer_training_texts", "200",
        "--validation_split_percentage", "10", "--max_steps", "6", "--save_steps", "3",
        "--eval_strategy", "steps", "--eval_steps", "3",
    ])
    assert status == 0
    return out


def test_output_folder_loads_with_every_auto_class_sharing_one_encoder(run):
    encoder = AutoModel.from_pretrained(run)
    masked_lm = AutoModelForMaskedLM.from_pretrained(run)
    pretraining = AutoModelForPreTraining.from_pretrained(run)

    assert type(encoder) is modeling_seed.SeedEncoderModel
    assert type(masked_lm) is modeling_seed.SeedEncoderForMaskedLM
    assert type(pretraining) is modeling_seed.SeedEncoderForPreTraining
    saved = weights(run)
    for name, tensor in encoder.state_dict().items():
        assert torch.equal(tensor, saved[f"bert.{name}"]), name
        assert torch.equal(masked_lm.bert.state_dict()[name], tensor), name
        assert torch.equal(pretraining.bert.state_dict()[name], tensor), name
    assert torch.equal(pretraining.weak_decoder.state_dict()["embeddings.position_embeddings.weight"],
                       saved["weak_decoder.embeddings.position_embeddings.weight"])


def test_trust_remote_code_loads_the_folder_code_without_the_library(run, tmp_path):
    ids = [[2, 10, 11, 12, 3]]
    program = (
        "import json, sys, torch\n"
        "from transformers import AutoModel\n"
        f"model = AutoModel.from_pretrained({str(run)!r}, trust_remote_code=True).eval()\n"
        "with torch.no_grad():\n"
        f"    cls = model(input_ids=torch.tensor({ids})).last_hidden_state[0, 0]\n"
        "print(json.dumps({'module': type(model).__module__, 'library_imported': 'modeling_seed' in sys.modules,"
        " 'cls': cls.tolist()}))\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=120
    )

    assert result.returncode == 0, result.stderr[-3000:]
    remote = json.loads(result.stdout.strip().splitlines()[-1])
    assert remote["module"].startswith("transformers_modules.")
    assert remote["library_imported"] is False
    with torch.no_grad():
        local_cls = AutoModel.from_pretrained(run).eval()(input_ids=torch.tensor(ids)).last_hidden_state[0, 0]
    torch.testing.assert_close(torch.tensor(remote["cls"]), local_cls)


def test_sentence_transformer_with_cls_pooling_encodes_to_the_cls_vector(run):
    transformer = Transformer(str(run))
    pooling = Pooling(transformer.get_embedding_dimension(), "cls")
    model = SentenceTransformer(modules=[transformer, pooling], device="cpu")
    texts = ["The president addressed the Congress.", "A short one."]

    embeddings = model.encode(texts, convert_to_tensor=True)

    assert transformer.get_embedding_dimension() == 64
    assert embeddings.shape == (2, 64)
    tokenizer, encoder = AutoTokenizer.from_pretrained(run), AutoModel.from_pretrained(run).eval()
    with torch.no_grad():
        cls_vectors = encoder(**tokenizer(texts, padding=True, return_tensors="pt")).last_hidden_state[:, 0]
    torch.testing.assert_close(embeddings, cls_vectors, atol=1e-5, rtol=1e-5)


def test_model_card_has_hub_metadata_and_states_the_final_losses(run):
    card = ModelCard.load(run / "README.md")
    metrics = json.loads((run / "all_results.json").read_text())
    last_train = [entry for entry in trainer_log(run / "checkpoint-6") if "loss" in entry][-1]

    assert card.data.library_name == "transformers"
    assert card.data.license == "apache-2.0"
    assert card.data.pipeline_tag == "feature-extraction"
    assert {"seed-encoder", "dense-retrieval"} <= set(card.data.tags)
    assert card.data.base_model is None
    train_row = [round(last_train["loss"], 4), last_train["mlm_loss"], last_train["decoder_loss"]]
    validation_row = [
        round(metrics["eval_loss"], 4), metrics["eval_mlm_loss"], metrics["eval_decoder_loss"],
        metrics["eval_cls_information"],
    ]
    assert "| train (last log) | {} | {} | {} | n/a |".format(*train_row) in card.text
    assert "| validation | {} | {} | {} | {} |".format(*validation_row) in card.text
    assert "- Steps: 6 (0.18 epochs), 270 training sequences of at most 128 tokens" in card.text
    assert "- Data: `prose.txt`" in card.text
    assert f"- Tokenizer: a {len(AutoTokenizer.from_pretrained(run)):,}-token WordPiece tokenizer trained on 200 of the corpus' 300 texts, drawn with seed 42" in card.text


def test_loss_curves_are_a_png_image(run):
    path = run / "loss_curves.png"

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size == (840, 480)


def test_log_history_has_both_loss_terms_their_sum_and_in_evaluation_the_cls_information(run):
    log = trainer_log(run / "checkpoint-6")
    train = [entry for entry in log if "loss" in entry]
    evaluation = [entry for entry in log if "eval_loss" in entry]

    assert [entry["step"] for entry in train] == [1, 2, 3, 4, 5, 6]
    assert [entry["step"] for entry in evaluation] == [3, 6]
    for entry in train:
        assert entry["loss"] == pytest.approx(entry["mlm_loss"] + entry["decoder_loss"], abs=1e-3)
    for entry in evaluation:
        assert entry["eval_loss"] == pytest.approx(entry["eval_mlm_loss"] + entry["eval_decoder_loss"], abs=1e-3)
        # How much the decoder reads from [CLS]: a loss difference, below the decoder loss it is part of.
        assert -entry["eval_decoder_loss"] < entry["eval_cls_information"] < entry["eval_decoder_loss"]


@pytest.mark.parametrize("suffix", ["yaml", "json"])
def test_arguments_file_sets_every_option_it_names(suffix, corpus, tmp_path):
    out = tmp_path / "out"
    arguments = {
        "train_file": [str(corpus)], "output_dir": str(out), "config_overrides": TINY_MODEL,
        "decoder_attention_span": "full", "decoder_num_layers": 1, "max_train_samples": 64, "max_seq_length": 48,
        "per_device_train_batch_size": 8, "validation_split_percentage": 0, "max_steps": 2, "seed": 3,
        "logging_steps": 1, "report_to": "none", "dataloader_pin_memory": False, "save_strategy": "no",
    }
    args_file = tmp_path / f"args.{suffix}"
    args_file.write_text(yaml.safe_dump(arguments) if suffix == "yaml" else json.dumps(arguments))

    assert pretrain([args_file]) == 0

    config = json.loads((out / "config.json").read_text())
    assert config["decoder_attention_span"] is None
    assert config["decoder_num_layers"] == 1
    assert config["hidden_size"] == 64
    card = card_text(out)
    assert 'full causal attention: the "strong decoder" ablation' in card
    assert "- Steps: 2 (0.25 epochs), 64 training sequences of at most 48 tokens" in card
    assert "seed 3" in card


def test_decoder_loss_weight_zero_trains_mlm_only(corpus, tmp_path):
    out = tmp_path / "out"

    status = pretrain([
        "--train_file", corpus, "--output_dir", out, *TINY_RUN, "--decoder_loss_weight", "0",
        "--max_steps", "2", "--save_steps", "2",
    ])

    assert status == 0
    assert json.loads((out / "config.json").read_text())["decoder_loss_weight"] == 0.0
    train = [entry for entry in trainer_log(out / "checkpoint-2") if "loss" in entry]
    assert len(train) == 2
    for entry in train:
        assert "decoder_loss" not in entry
        assert entry["loss"] == pytest.approx(entry["mlm_loss"], abs=1e-3)


def test_warm_start_from_minilm_keeps_its_shape_and_starts_from_its_weights(corpus, tmp_path, minilm_dir):
    out = tmp_path / "out"

    status = pretrain([
        "--model_name_or_path", minilm_dir, "--base_model", "sentence-transformers/all-MiniLM-L6-v2",
        "--train_file", corpus, "--output_dir", out, "--max_train_samples", "16",
        "--max_seq_length", "32", "--per_device_train_batch_size", "4", "--max_steps", "2", "--save_strategy", "no",
        "--validation_split_percentage", "0", "--logging_steps", "1", "--report_to", "none",
        "--dataloader_pin_memory", "false",
    ])

    assert status == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (384, 6, 30522)
    assert ModelCard.load(out / "README.md").data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert f"warm-started from `{minilm_dir}`" in card_text(out)  # the local folder: named in the text only
    minilm = AutoModel.from_pretrained(minilm_dir).state_dict()
    seed = AutoModel.from_pretrained(out).state_dict()
    encoder_names = [name for name in minilm if not name.startswith("pooler.")]
    assert encoder_names and set(encoder_names) <= set(seed)
    # Two AdamW steps at a learning rate of at most 5e-4 move each weight by about 1e-3 at most;
    # a fresh initialisation would be ~0.02 away everywhere.
    for name in encoder_names:
        torch.testing.assert_close(seed[name], minilm[name], atol=5e-3, rtol=0, msg=name)


def test_streaming_run_reads_the_file_as_a_stream_for_max_steps(corpus, tmp_path):
    out = tmp_path / "out"

    status = pretrain(["--train_file", corpus, "--output_dir", out, *TINY_RUN, "--streaming", "--max_steps", "3"])

    assert status == 0
    assert json.loads((out / "all_results.json").read_text())["global_step"] == 3
    assert "- Steps: 3 (" in card_text(out)
    assert "a stream of training sequences" in card_text(out)


def test_dataset_dir_trains_on_a_save_to_disk_folder(pretrain_lines, tmp_path):
    dataset_dir = tmp_path / "saved"
    lines = pretrain_lines(48)
    Dataset.from_dict({"text": lines, "source": ["shared"] * len(lines)}).save_to_disk(str(dataset_dir))
    out = tmp_path / "out"

    status = pretrain(["--dataset_dir", dataset_dir, "--output_dir", out, *TINY_RUN, "--max_steps", "2"])

    assert status == 0
    card = card_text(out)
    assert f"- Data: `{dataset_dir}` (datasets save_to_disk folder)" in card
    assert "- Steps: 2 (0.33 epochs), 48 training sequences" in card


@pytest.mark.parametrize("streaming", [False, True])
def test_beir_corpus_jsonl_trains_with_titles_joined(streaming, shared_data_dir, tmp_path):
    with (shared_data_dir / "scifact" / "corpus.jsonl").open(encoding="utf-8") as handle:
        records = [json.loads(next(handle)) for _ in range(40)]
    corpus = write_lines(tmp_path / "corpus.jsonl", [json.dumps(record) for record in records])
    out = tmp_path / "out"

    status = pretrain([
        "--train_file", corpus, "--output_dir", out, *TINY_RUN, "--max_steps", "2", *(["--streaming"] * streaming),
    ])

    assert status == 0
    assert ("a stream of training sequences" if streaming else "- Steps: 2 (0.40 epochs), 40 training sequences") in (
        card_text(out)
    )
    vocabulary = AutoTokenizer.from_pretrained(out).get_vocab()
    title_only_words = {
        word for record in records for word in record["title"].lower().split()
        if word.isalpha() and all(word not in r["text"].lower() for r in records)
    }
    assert title_only_words, "the first SciFact records should have title words absent from every abstract"
    assert title_only_words & set(vocabulary), "the tokenizer was trained without the titles"


def test_help_lists_every_pretraining_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        pretrain(["--help"])

    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for flag in (
        "--decoder_attention_span", "--decoder_num_layers", "--decoder_loss_weight", "--train_file", "--dataset_dir",
        "--streaming", "--text_column", "--validation_split_percentage", "--overwrite_output_dir", "--config_name",
        "--model_name_or_path", "--tokenizer_name", "--config_overrides", "--max_seq_length", "--max_train_samples",
    ):
        assert flag in help_text, flag
