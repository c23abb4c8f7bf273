"""dynascope.console: styling by line role, and one exit status rule for the commands that run scripts."""

import io

import pytest

from dynascope.console import HEADING, NOTE, RESUME, make_console, print_lines, script_exit_status


def test_lines_are_styled_by_role_and_never_read_as_markup():
    buf = io.StringIO()
    console = make_console(buf, width=100, color=True)
    print_lines(console, [("Cache entry 1", HEADING), ("note: [bold]x[/bold]", NOTE),
                          ("if x:  <== resume in this line", RESUME), ("plain", None)])
    out = buf.getvalue().splitlines()
    assert out[0] == "\x1b[1mCache entry 1\x1b[0m"
    assert "[bold]x[/bold]" in out[1] and out[1].startswith("\x1b[35m")
    assert out[2].startswith("\x1b[1;33m") and out[3] == "plain"
    plain = io.StringIO()
    print_lines(make_console(plain, width=100, color=False), [("Cache entry 1", HEADING)])
    assert plain.getvalue() == "Cache entry 1\n"


def _raised(exc):
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001
        return caught


def test_exit_status_of_a_script_run(capsys):
    assert script_exit_status("run", "s.py", None) == 0
    assert script_exit_status("run", "s.py", SystemExit(3)) == 3
    assert script_exit_status("explain", "s.py", SystemExit("bad config")) == 1
    assert capsys.readouterr().err == "bad config\n"
    assert script_exit_status("explain", "s.py", _raised(KeyboardInterrupt())) == 130
    assert capsys.readouterr().err == "dynascope explain: interrupted; the outputs above cover the run until then\n"
    assert script_exit_status("run", "/x/s.py", _raised(ValueError("bad batch"))) == 1
    err = capsys.readouterr().err
    assert "dynascope run: s.py raised ValueError" in err and err.rstrip().endswith("ValueError: bad batch")


@pytest.mark.parametrize("tty_width", [None])
def test_piped_console_is_a_log_files_width_and_colourless(tty_width, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    console = make_console(io.StringIO(), width=tty_width)
    assert console.width == 100 and console.no_color
