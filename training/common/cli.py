"""What the command-line scripts share: one way to read arguments and one way to report bad input."""

import argparse
import dataclasses
import difflib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import yaml
from transformers import HfArgumentParser

from .errors import InputError


class ArgumentParser(HfArgumentParser):
    """`HfArgumentParser` that also takes positional arguments: a list field whose metadata has
    `positional=True` is filled from the words before the flags (`script.py a b --flag x`)."""

    @staticmethod
    def _parse_dataclass_field(parser, field: dataclasses.Field) -> None:
        if field.metadata.get("positional"):
            parser.add_argument(field.name, nargs="+", metavar=field.metadata.get("metavar"), help=field.metadata["help"])
        else:
            HfArgumentParser._parse_dataclass_field(parser, field)


def check_list_flags_given_once(parser: HfArgumentParser, argv: list[str]) -> None:
    """Refuse a flag that takes several values given more than once: argparse would keep the last and silently drop
    the others (`--teacher bm25 --teacher start` would distil from the start alone)."""
    for action in parser._actions:
        if action.nargs not in ("+", "*") or not action.option_strings:
            continue
        given = [word for word in argv if word.split("=", 1)[0] in action.option_strings]
        if len(given) > 1:
            flag = action.option_strings[0]
            raise InputError(
                f"{flag} is given {len(given)} times, and only its last values would count. Give all of its values "
                f"after one {flag} (e.g. {flag} A B)."
            )


CONFIG_FLAG = "--config"
ARGUMENT_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def recipe_file_field():
    """The `config` field of a training script's arguments: the recipe file `--config` named, kept for the card."""
    return dataclasses.field(
        default=None,
        metadata={
            "help": "A recipe file (YAML or JSON, e.g. one of recipes/) whose values are this run's defaults; flags "
            "given beside it override them. The model card records the file."
        },
    )


def split_config(argv: list[str]) -> tuple[str | None, list[str]]:
    """The arguments file `--config FILE` names (or a YAML/JSON file as the first argument, the older form) and the
    other arguments."""
    named = [index for index, word in enumerate(argv) if word == CONFIG_FLAG or word.startswith(f"{CONFIG_FLAG}=")]
    if len(named) > 1:
        raise InputError(f"{CONFIG_FLAG} is given {len(named)} times. Name one recipe file; flags override its values.")
    if named:
        [index] = named
        if "=" in argv[index]:
            return argv[index].split("=", 1)[1], argv[:index] + argv[index + 1:]
        if index + 1 == len(argv) or argv[index + 1].startswith("--"):
            raise InputError(f"{CONFIG_FLAG}: expected a recipe file after it (YAML or JSON), e.g. {CONFIG_FLAG} recipes/finetune_dense_beir.yaml.")
        return argv[index + 1], argv[:index] + argv[index + 2:]
    if argv and argv[0].endswith(ARGUMENT_FILE_SUFFIXES) and not argv[0].startswith("-"):
        return argv[0], argv[1:]
    return None, argv


def read_arguments_file(path: str) -> dict:
    """The mapping of argument names to values in a YAML or JSON file, refused (InputError) where it is not one."""
    file = Path(path)
    if not file.is_file():
        raise InputError(f"{CONFIG_FLAG} {path}: no such file.")
    try:
        values = yaml.safe_load(file.read_text(encoding="utf-8"))  # JSON is YAML
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"{path}{where}: not valid YAML or JSON ({getattr(error, 'problem', error)}).") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise InputError(f"{path}: expected argument names and their values (a mapping), found a {type(values).__name__}.")
    return values


def command_line_words(value) -> list[str]:
    """A recipe value as the words a flag takes: a list's items, a mapping as JSON, true/false for a boolean."""
    if isinstance(value, list):
        return [str(item) for item in value]
    if isinstance(value, dict):
        return [json.dumps(value)]
    if isinstance(value, bool):
        return [str(value).lower()]
    return [str(value)]


def as_flags(parser: HfArgumentParser, path: str, values: dict, argv: list[str]) -> list[str]:
    """`values` written as the command-line words that set them, leaving out those that `argv` sets itself: placed
    before `argv`, the file gives defaults and the flags override them. Positional values (e.g. evaluate.py's
    retrievers) count as given when `argv` starts with a word that is not a flag."""
    by_flag = {option: action for action in parser._actions for option in action.option_strings}
    positionals = {action.dest: action for action in parser._actions if not action.option_strings}
    given = {by_flag[word.split("=", 1)[0]].dest for word in argv if word.split("=", 1)[0] in by_flag}
    positional_given = bool(argv) and not argv[0].startswith("-")
    leading, flags = [], []
    for key, value in values.items():
        action = by_flag.get(f"--{key}") or positionals.get(key)
        if action is None:
            close = difflib.get_close_matches(f"--{key}", list(by_flag), n=1)
            hint = f" Did you mean {close[0].lstrip('-')}?" if close else ""
            raise InputError(f"{path}: {key!r} is not an argument of this script (see --help).{hint}")
        if key == CONFIG_FLAG.lstrip("-"):
            raise InputError(f"{path}: names another recipe file ({value}); a recipe holds argument values only.")
        if value is None:
            raise InputError(f"{path}: {key!r} is null. Leave it out to keep its default, or give a value.")
        words = command_line_words(value)
        if not action.option_strings:
            leading += [] if positional_given else words
        elif key not in given:
            flags += [f"--{key}", *words]
    return leading + flags


def parse_arguments(parser: HfArgumentParser, argv: list[str]) -> tuple:
    """The parser's dataclasses from flags, over the values of a recipe file when `--config FILE` names one (flags
    override the file's values; a lone YAML or JSON argument is read the same way)."""
    # Whether the arguments keep the file's name: a dataclass field, not whether --config is among the parser's
    # options (the one added below for --help would then count on the parser's next use).
    config_field = any(field.name == CONFIG_FLAG.lstrip("-") for dtype in parser.dataclass_types for field in dataclasses.fields(dtype))
    if not any(CONFIG_FLAG in action.option_strings for action in parser._actions):
        parser.add_argument(  # for --help; split_config takes it out of argv before argparse reads the rest
            CONFIG_FLAG, metavar="RECIPE", default=argparse.SUPPRESS,
            help="A recipe file (YAML or JSON, e.g. one of recipes/) that sets arguments; flags given beside it "
            "override its values.",
        )
    config, argv = split_config(argv)
    if config is not None:
        # A training script's arguments keep the file's name (its `config` field), for the model card.
        argv = as_flags(parser, config, read_arguments_file(config), argv) + argv + ([CONFIG_FLAG, config] if config_field else [])
    try:
        check_list_flags_given_once(parser, argv)
        return parser.parse_args_into_dataclasses(args=argv)
    except InputError:  # our own checks in the dataclasses' __post_init__ already say what to do
        raise
    except ValueError as error:  # TrainingArguments' own checks, e.g. --bf16 on a CPU without --use_cpu
        raise InputError(f"Invalid arguments: {error}") from None


def exit_status(run: Callable[[], str | None]) -> int:
    """Run a script's work: 0 after printing its success line (None: nothing to print, as on a process other than
    the main one), 2 after printing a bad-input error."""
    try:
        message = run()
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if message is not None:
        print(message)
    return 0
