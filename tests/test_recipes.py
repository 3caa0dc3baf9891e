"""Recipes (`recipes/*.yaml`): a file sets a script's arguments, flags beside `--config` override it, and the run's
card shows the file. Every recipe in the folder parses with its script and names only arguments it takes."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from transformers import HfArgumentParser

from pretrain_helpers import TINY_MODEL, pretrain
from training.common.cli import ArgumentParser, parse_arguments
from training.common.errors import InputError
from training.evaluation.arguments import EvaluationArguments
from training.finetuning.arguments import (
    FinetuningDataArguments,
    FinetuningModelArguments,
    RecipeArguments,
    SeedFinetuningArguments,
)
from training.pretraining.arguments import DataArguments, ModelArguments, SeedPretrainingArguments

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def parser_for(recipe: Path) -> HfArgumentParser:
    """The arguments of the script a recipe is for: its name says which (pretrain_*, finetune_*, quickstart_*)."""
    if "pretrain" in recipe.stem:
        return HfArgumentParser((ModelArguments, DataArguments, SeedPretrainingArguments))
    return HfArgumentParser((FinetuningModelArguments, FinetuningDataArguments, RecipeArguments, SeedFinetuningArguments))


def as_dicts(parsed: tuple) -> list[dict]:
    return [{key: value for key, value in dataclasses.asdict(part).items() if key != "config"} for part in parsed]


@pytest.mark.parametrize("recipe", sorted(RECIPES.glob("*.yaml")), ids=lambda path: path.name)
def test_every_recipe_parses_with_its_script_and_sets_what_it_names(recipe):
    values = yaml.safe_load(recipe.read_text())
    assert recipe.read_text().startswith("#"), "a recipe opens with comment lines: what it is for, what it measured"

    # A GPU recipe's bf16 cannot be parsed on this CPU (TrainingArguments refuses it): turned off by a flag.
    on_this_machine = ["--bf16", "false"] if values.get("bf16") else []

    parsed = parse_arguments(parser_for(recipe), ["--config", str(recipe), *on_this_machine])

    resolved = {key: value for part in parsed for key, value in dataclasses.asdict(part).items()}
    for key, value in values.items():
        if on_this_machine and key == "bf16":
            continue
        assert resolved[key] == value or str(resolved[key]) == str(value) or float(resolved[key]) == float(value), key
    assert resolved["config"] == str(recipe)


@pytest.mark.parametrize("recipe", ["quickstart_pretrain.yaml", "quickstart_finetune.yaml"])
def test_the_quickstart_recipes_are_the_defaults(recipe):
    """The no-argument chain, written out: a default changed without its recipe (or the reverse) fails here."""
    parser = parser_for(RECIPES / recipe)

    assert as_dicts(parse_arguments(parser, ["--config", str(RECIPES / recipe)])) == as_dicts(parse_arguments(parser, []))


def test_a_flag_beside_the_recipe_wins_and_the_file_fills_the_rest(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("learning_rate: 3.0e-5\nmax_steps: 64\nteacher: [bm25, start]\nsparse: true\n")
    parser = parser_for(RECIPES / "finetune_dense_beir.yaml")

    model, _, options, training = parse_arguments(
        parser, ["--config", str(recipe), "--learning_rate", "1e-4", "--teacher", "bm25"]
    )

    assert training.learning_rate == 1e-4 and options.teacher == ["bm25"]  # the flags
    assert training.max_steps == 64 and model.sparse is True  # the file
    assert training.config == str(recipe)


@pytest.mark.parametrize(
    "content, message",
    [
        ("learning_rat: 1e-4\n", "'learning_rat' is not an argument of this script (see --help). Did you mean learning_rate?"),
        ("teacher:\n", "'teacher' is null. Leave it out to keep its default, or give a value."),
        ("config: other.yaml\n", "names another recipe file (other.yaml)"),
        ("- learning_rate\n", "expected argument names and their values (a mapping), found a list."),
        ("learning_rate: [1\n", ", line 2: not valid YAML or JSON"),
    ],
)
def test_a_bad_recipe_is_refused_naming_the_file(tmp_path, content, message):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(content)

    with pytest.raises(InputError) as refusal:
        parse_arguments(parser_for(RECIPES / "finetune_dense_beir.yaml"), ["--config", str(recipe)])

    assert str(refusal.value).startswith(str(recipe)) and message in str(refusal.value)


def test_a_missing_recipe_or_a_config_flag_without_one_is_refused(tmp_path):
    parser = parser_for(RECIPES / "finetune_dense_beir.yaml")
    with pytest.raises(InputError, match="--config .*no-such.yaml: no such file."):
        parse_arguments(parser, ["--config", str(tmp_path / "no-such.yaml")])
    with pytest.raises(InputError, match="--config: expected a recipe file after it"):
        parse_arguments(parser, ["--config", "--learning_rate", "1e-4"])


@pytest.mark.slow
def test_a_run_from_a_recipe_with_an_override_records_both(tmp_path, pretrain_lines):
    corpus = tmp_path / "prose.txt"
    corpus.write_text("\n".join(pretrain_lines(100)) + "\n")
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump({
        "train_file": [str(corpus)], "config_overrides": TINY_MODEL, "max_seq_length": 32, "max_steps": 2,
        "per_device_train_batch_size": 4, "validation_split_percentage": 0, "report_to": "none",
        "decoder_num_layers": 2, "seed": 3,
    }))
    out = tmp_path / "out"

    assert pretrain(["--config", recipe, "--decoder_num_layers", "1", "--output_dir", out, "--save_strategy", "no"]) == 0

    assert json.loads((out / "config.json").read_text())["decoder_num_layers"] == 1  # the flag
    card = (out / "README.md").read_text()
    assert "schedule, seed 3" in card  # the file
    assert f"With the values of the recipe file `{recipe}`" in card and "decoder_num_layers: 2" in card


def test_a_parser_reads_a_recipe_the_same_way_each_time_it_is_used(tmp_path):
    """The --config option added for --help must not pass for a `config` field on the parser's next use."""
    recipe = tmp_path / "evaluate.yaml"
    recipe.write_text("retrievers: [bm25]\ntop_k: 1000\n")
    parser = ArgumentParser(EvaluationArguments)

    first, second = (parse_arguments(parser, ["--config", str(recipe), "--data_dir", str(tmp_path)]) for _ in range(2))

    assert len(first) == len(second) == 1 and first[0].retrievers == second[0].retrievers == ["bm25"]
