"""The one way dynascope's commands talk to the terminal: rich consoles, report lines styled by the
role their producer gave them (never by matching their text), one-line messages on stderr, and the
exit status of a user script a command ran (`dynascope run` and `dynascope explain` alike).

No torch, no analyze: capture, explain, render and cli.py may all import this.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from collections.abc import Iterable, Iterator
from typing import IO

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.rule import Rule
from rich.text import Text

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


# A space that joins a figure to its unit ("5.32 ms", "(+355 µs", "4.1 kB", "12%", "2 min 5 s"): a wrapped
# line never breaks there, so that no line ends in a bare number whose unit starts the next one.
_UNIT_SPACE = re.compile(r"(?<=\d) (?=(?:ns|µs|us|ms|s|min|h|[kMGT]i?B|B|%|×)(?!\w))|(?<=\d min) (?=\d)")
_WORD = re.compile(r" *[^ ]+ *")


def break_offsets(plain: str, width: int) -> list[int]:
    """Where to break one line of text to fit `width` cells: greedily at spaces, as rich wraps words,
    but never at a space between a figure and its unit (a word longer than the width is left whole on
    a line of its own)."""
    joined = _UNIT_SPACE.sub("\0", plain)  # same length: a joined space is no word break
    offsets: list[int] = []
    used = 0
    for m in _WORD.finditer(joined):
        start, end = m.span()
        word = plain[start:end]
        if used and used + cell_len(word.rstrip()) > width:
            offsets.append(start)
            used = cell_len(word)
        else:
            used += cell_len(word)
    return offsets


def wrap_text(text: Text, width: int) -> list[Text]:
    """`text` as lines of at most `width` cells (its styles kept), broken at spaces but never between a
    figure and its unit; its own newlines are kept. A continuation line starts at column 0."""
    lines: list[Text] = []
    for line in text.split("\n", allow_blank=True):
        offsets = break_offsets(line.plain, max(width, 1))
        pieces = line.divide(offsets) if offsets else [line]
        for piece in pieces:
            piece.rstrip()
            lines.append(piece)
    return lines


class Prose:
    """A line (or lines) of prose printed at the console's width: wrapped at words as rich wraps them,
    but a figure and its unit are one word (`wrap_text`). Printed whole where the console does not wrap
    (soft_wrap)."""

    def __init__(self, text: Text | str, style: str | None = None) -> None:
        self.text = text if isinstance(text, Text) else Text(text, style=style or "")

    def lines(self, width: int) -> Iterator[Text]:
        yield from wrap_text(self.text, width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if options.no_wrap:
            yield self.text
            return
        yield from self.lines(options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.text)


def print_lines(console: Console, rows: Iterable[tuple[str, str | None]]) -> None:
    """Print (text, role) lines, each styled by its role; text is never read as markup; a wrapped line
    keeps each figure with its unit (Prose)."""
    for text, role in rows:
        console.print(Prose(text, style=STYLES.get(role or "")), highlight=False)


def print_rule(console: Console, title: str) -> None:
    console.print(Rule(title, style="cyan"))


def say(command: str, text: str) -> None:
    """One line on stderr, as `dynascope <command>: text`."""
    print(f"dynascope {command}: {text}", file=sys.stderr)


def script_exit_status(command: str, script: str, error: BaseException | None) -> int:
    """The exit status of a command that ran `script` and wrote its outputs: 0, the script's own
    SystemExit code, 130 after Ctrl-C, else 1 with the script's traceback on stderr."""
    from dynascope.scriptrun import strip_our_frames

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
    from dynascope.errors import DynascopeError

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
