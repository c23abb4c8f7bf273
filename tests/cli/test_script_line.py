"""Every script-running command reads its line as `python -m cProfile` does (cli/_script_line.py): our options
first, then the script, and everything after the script is the script's."""

from __future__ import annotations

import pytest

from dynascope.cli import bisect, compile_profile, explain, run
from dynascope.cli._script_line import parse_script_line, split_script_line
from dynascope.errors import ConfigError


def test_after_the_script_everything_is_the_scripts_even_our_own_option_names():
    ns = parse_script_line(compile_profile._parser(), ["--json", "p.json", "train.py", "--json", "its.json", "--", "x"])
    assert (ns.json, ns.script, ns.args) == ("p.json", "train.py", ["--json", "its.json", "--", "x"])


def test_an_options_value_is_never_taken_for_the_script():
    ns = parse_script_line(run._parser(), ["--out", "out.py", "--top", "3", "train.py", "a"])
    assert (ns.out, ns.top, ns.script, ns.args, ns.module) == ("out.py", 3, "train.py", ["a"], False)
    ns = parse_script_line(run._parser(), ["--out=d", "--shapes", "train.py"])
    assert (ns.out, ns.shapes, ns.script, ns.args) == ("d", True, "train.py", [])


def test_a_double_dash_ends_our_options_and_minus_m_names_a_module():
    assert split_script_line(explain._parser(), ["--quiet", "--", "-odd.py", "--out", "x"]) == (
        ["--quiet"], "-odd.py", ["--out", "x"], False)
    ns = parse_script_line(run._parser(), ["--out", "d", "-m", "pkg.train", "-m", "x"], module=True)
    assert (ns.script, ns.module, ns.args) == ("pkg.train", True, ["-m", "x"])


def test_an_unknown_option_is_argparses_one_line_error(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_script_line(explain._parser(), ["-m", "pkg"])  # -m is an option only where a command runs modules
    assert exc.value.code == 2 and "unrecognized arguments: -m" in capsys.readouterr().err


def test_no_script_is_one_line_that_gives_the_usage():
    with pytest.raises(ConfigError, match=r"give the script to run: dynascope compile-profile \[--json OUT\]"):
        parse_script_line(compile_profile._parser(), ["--top", "3"])
    with pytest.raises(ConfigError, match=r"give the script to run: dynascope bisect \[options\] script.py"):
        parse_script_line(bisect.build_parser(), ["--json", "x.json"])
