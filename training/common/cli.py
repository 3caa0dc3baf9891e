"""What the command-line scripts share: one way to read arguments and one way to report bad input."""

import dataclasses
import sys
from collections.abc import Callable

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


def parse_arguments(parser: HfArgumentParser, argv: list[str]) -> tuple:
    """The parser's dataclasses from flags, or from a single JSON or YAML file of arguments."""
    try:
        if len(argv) == 1 and argv[0].endswith(".json"):
            return parser.parse_json_file(argv[0])
        if len(argv) == 1 and argv[0].endswith((".yaml", ".yml")):
            return parser.parse_yaml_file(argv[0])
        check_list_flags_given_once(parser, argv)
        return parser.parse_args_into_dataclasses(args=argv)
    except InputError:  # our own checks in the dataclasses' __post_init__ already say what to do
        raise
    except ValueError as error:  # TrainingArguments' own checks, e.g. --bf16 on a CPU without --use_cpu
        raise InputError(f"Invalid arguments: {error}") from None


def exit_status(run: Callable[[], str]) -> int:
    """Run a script's work: 0 after printing its success line, 2 after printing a bad-input error."""
    try:
        message = run()
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(message)
    return 0
