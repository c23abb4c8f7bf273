"""`dynascope.compare_eager`, and the rule behind every verdict (analyze/payoff.py)."""

import io

import pytest
import torch

import dynascope
from dynascope.analyze.payoff import Sample, judge, sample
from dynascope.errors import ConfigError

SINK = io.StringIO()


def test_the_rule_speedup_repayment_and_noise():
    compiled, eager = Sample(20, 90, 100, 110), Sample(20, 380, 400, 420)
    found = judge(compiled, eager, compile_us=30_000)
    assert found["speedup"] == 4 and found["saving_us"] == 300 and found["breakeven_calls"] == 100
    assert not found["noisy"] and "4.00x faster" in found["verdict"] and "100 calls" in found["verdict"]
    slower = judge(Sample(20, 190, 200, 210), Sample(20, 90, 100, 110), compile_us=1000)
    assert slower["breakeven_calls"] is None and "never pays off" in slower["verdict"]
    overlap = judge(Sample(20, 95, 100, 130), Sample(20, 105, 110, 140), compile_us=1000)
    assert overlap["noisy"] and "overlap" in overlap["verdict"]
    few = judge(Sample(3, 10, 10, 10), Sample(3, 90, 90, 90), compile_us=1)
    assert few["noisy"] and "too few" in few["verdict"]
    assert sample([5, 1, 3, 2, 4]) == Sample(5, 2, 3, 4) and sample([]) is None


def test_compare_eager_finds_a_win():
    def folded(x):
        s = 0.0
        for i in range(1000):
            s += float(i % 7) * 0.001
        return x * s

    torch._dynamo.reset()
    result = dynascope.compare_eager(torch.compile(folded, backend="eager"), torch.randn(16), calls=20)
    assert result.speedup > 2 and not result.noisy and result.breakeven_calls > 0
    assert result.compile_us > result.compiled.median  # the first call compiled
    assert "faster" in str(result)


def split(x):
    x = x + 1
    print("a", file=SINK)
    x = x * 2
    print("b", file=SINK)
    return x - 1


def test_compare_eager_finds_a_loss():
    torch._dynamo.reset()
    result = dynascope.compare_eager(torch.compile(split, backend="aot_eager"), torch.randn(16), calls=30)
    assert result.speedup < 0.8 and result.breakeven_calls is None
    assert "never pays off" in result.verdict or result.noisy


def test_compare_eager_says_what_is_wrong_with_its_arguments():
    with pytest.raises(ConfigError, match="a function to call"):
        dynascope.compare_eager(3)
    with pytest.raises(ConfigError, match="2 or more"):
        dynascope.compare_eager(lambda: None, calls=1)
