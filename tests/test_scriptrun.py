import pytest

from dynascope.errors import ConfigError
from dynascope.scriptrun import trailing_options


def test_trailing_options_take_ours_and_leave_the_scripts():
    values, rest = trailing_options(["a", "--out", "d", "--x", "--json=j.json", "--", "--out", "s"], ("--out", "--json"), "u")
    assert values == {"--out": "d", "--json": "j.json"}
    assert rest == ["a", "--x", "--out", "s"]  # after `--` everything is the script's


def test_a_trailing_option_without_its_value_says_so():
    with pytest.raises(ConfigError, match="--out needs a value: usage"):
        trailing_options(["a", "--out"], ("--out",), "usage")
