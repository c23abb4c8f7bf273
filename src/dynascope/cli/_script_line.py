"""The command line of every command that runs a script (run, explain, bisect, compile-profile, debug), read
the way `python -m cProfile` reads its own: our options first, then the script (or `-m MODULE` where the
command takes one), and everything after it is the script's, untouched (its own `--out` or `--json`
included). A `--` before the script ends our options, for a script whose name starts with "-"."""

from __future__ import annotations

import argparse

from dynascope.errors import ConfigError


def parse_script_line(parser: argparse.ArgumentParser, argv: list[str], module: bool = False) -> argparse.Namespace:
    """`parser`'s options from before the script; `ns.script` the script (or the module, with `ns.module`
    True where `module` allows `-m MODULE`); `ns.args` every argument after it. The parser declares
    `script` and `args` (nargs=REMAINDER) positionals, which its --help shows."""
    options, script, rest, is_module = split_script_line(parser, argv, module)
    if script is None:
        if not {"-h", "--help"} & set(options):
            usage = parser.usage or f"{parser.prog} [options] script.py [script args] (options: {parser.prog} --help)"
            raise ConfigError(f"give the script to run: {usage}")
        return parser.parse_args(options)  # prints --help and exits
    ns = parser.parse_args([*options, "--", script])
    ns.args, ns.module = rest, is_module
    return ns


def split_script_line(parser: argparse.ArgumentParser, argv: list[str],
                      module: bool = False) -> tuple[list[str], str | None, list[str], bool]:  # fmt: skip
    """(our options, the script or module or None, the script's arguments, whether it is a module)."""
    takes_value = {s for a in parser._actions if a.option_strings and a.nargs != 0 for s in a.option_strings}
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return argv[:i], (argv[i + 1] if i + 1 < len(argv) else None), argv[i + 2 :], False
        if module and token == "-m" and i + 1 < len(argv):
            return argv[:i], argv[i + 1], argv[i + 2 :], True
        if not token.startswith("-") or token == "-":
            return argv[:i], token, argv[i + 1 :], False
        if "=" not in token and token in takes_value:
            i += 1  # the option's value, even one that looks like a file name
        i += 1
    return argv, None, [], False
