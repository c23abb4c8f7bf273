"""The one way dynascope's commands talk to the terminal: rich consoles, report lines styled by the
role their producer gave them (never by matching their text), one-line messages on stderr, and the
exit status of a user script a command ran (`dynascope run` and `dynascope explain` alike).

No torch, no analyze: capture, explain, render and cli.py may all import this.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Iterable
from typing import IO

from rich.console import Console
from rich.rule import Rule

PIPE_WIDTH = 100  # columns when the output is not a terminal: a log file's (COLUMNS, where set, wins)
INTERRUPTED = 130  # the exit status of a run stopped by Ctrl-C, as a shell gives it

# report line roles (see explain.model.Lines) and their terminal styles
HEADING, NOTE, RESUME = "heading", "note", "resume"
STYLES = {HEADING: "bold", NOTE: "magenta", RESUME: "bold yellow"}


def make_console(file: IO[str] | None = None, width: int | None = None, color: bool | None = None,
                 soft_wrap: bool = False) -> Console:
    """A console that writes to `file` (stdout by default). A terminal's own width is used; when `file` is
    not a terminal (piped, or a log file) the width is the COLUMNS environment variable, else PIPE_WIDTH
    (100), and there is no colour. Every table fits that width (render/_table.py). soft_wrap=True leaves
    long lines whole (code and guards) instead of wrapping them."""
    file = file if file is not None else sys.stdout
    isatty = bool(getattr(file, "isatty", lambda: False)())
    if width is None and not isatty:
        try:
            width = int(os.environ.get("COLUMNS", "")) or PIPE_WIDTH
        except ValueError:
            width = PIPE_WIDTH
    if color is None:
        color = isatty and "NO_COLOR" not in os.environ
    return Console(
        file=file,
        width=width,
        force_terminal=True if color else None,
        no_color=not color,
        color_system="auto" if color else None,
        highlight=False,
        emoji=False,
        soft_wrap=soft_wrap,
    )


def print_lines(console: Console, rows: Iterable[tuple[str, str | None]]) -> None:
    """Print (text, role) lines, each styled by its role; text is never read as markup."""
    for text, role in rows:
        console.print(text, style=STYLES.get(role or ""), markup=False, highlight=False)


def print_rule(console: Console, title: str) -> None:
    console.print(Rule(title, style="cyan"))


def say(command: str, text: str) -> None:
    """One line on stderr, as `dynascope <command>: text`."""
    print(f"dynascope {command}: {text}", file=sys.stderr)


def script_exit_status(command: str, script: str, error: BaseException | None) -> int:
    """The exit status of a command that ran `script` and wrote its outputs: 0, the script's own
    SystemExit code, 130 after Ctrl-C, else 1 with the script's traceback on stderr."""
    from .scriptrun import strip_our_frames

    if error is None:
        return 0
    if isinstance(error, SystemExit):
        if isinstance(error.code, int):
            return error.code
        print(error.code, file=sys.stderr)  # as Python prints sys.exit("message")
        return 1
    if isinstance(error, KeyboardInterrupt):
        say(command, "interrupted; the outputs above cover the run until then")
        return INTERRUPTED
    from .errors import DynascopeError

    if isinstance(error, DynascopeError):  # ours (e.g. --no-recompiles): its message says it all
        print(file=sys.stderr)
        say(command, f"{os.path.basename(script)} stopped: {error}")
        return 1
    strip_our_frames(error)
    print(file=sys.stderr)
    say(
        command,
        f"{os.path.basename(script)} raised {type(error).__name__}; the outputs above cover the run until then.",
    )
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    return 1
