"""The `dynascope` command. Each subcommand lives next to the code it drives; this file only dispatches.

Every handler is `main(argv: list[str]) -> int` and builds its own argparse parser with
`prog="dynascope <name>"`. A DynascopeError anywhere becomes one line on stderr and exit status 2.
"""

from __future__ import annotations

import importlib
import sys

from dynascope.errors import DynascopeError

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("dynascope.cli.demo", "trace a small ConvNet training loop on synthetic data and summarise it"),
    "run": (
        "dynascope.cli.run",
        "run a script with every torch.compile traced and explained; write trace, explanation, HTML",
    ),
    "explain": (
        "dynascope.cli.explain",
        "run a script and explain what Dynamo did to each compiled function (or show a run's saved explanation)",
    ),
    "report": ("dynascope.cli.report", "summarise traces: terminal tables, --json, --csv, --html"),
    "convert": ("dynascope.cli.convert", "write Chrome-trace JSON that Perfetto and chrome://tracing open"),
    "view": ("dynascope.cli.view", "open a trace in a local viewer"),
    "diff": ("dynascope.cli.diff", "compare two traces per op and per layer"),
    "bisect": (
        "dynascope.cli.bisect",
        "find the compile stage and the op that break or change a script's results; write a repro",
    ),
    "compile-profile": (
        "dynascope.cli.compile_profile",
        "run a script and show where compile time goes: frames, phases, your functions and lines, breaks",
    ),
    "debug": (
        "dynascope.cli.debug",
        "run a script with Dynamo's generated code as decompiled .py files where breakpoints stop",
    ),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: dynascope <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `dynascope <command> --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from dynascope import __version__

        print(f"dynascope {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"dynascope: unknown command {name!r}; choose one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    try:
        try:
            handler = importlib.import_module(COMMANDS[name][0]).main
        except ModuleNotFoundError as exc:
            if not (exc.name or "").startswith("dynascope"):
                raise
            print(f"dynascope {name}: this install lacks {exc.name}; reinstall dynascope", file=sys.stderr)
            return 2
        return int(handler(rest) or 0)
    except DynascopeError as exc:
        print(f"dynascope {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dynascope {name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
