"""Clock alignment across hosts from collective completions (docs/ranks.md): ranks of a second host whose
clock runs a known amount ahead."""

from __future__ import annotations

from comm_synth import bench_ranks, job


def test_offset_of_a_shifted_host_is_found_and_removed(tmp_path):
    mod = bench_ranks()
    shift = 1_250_000  # host 1 (ranks 2, 3) is 1.25 s ahead, plus an odd part
    _, s = job(tmp_path, world=4, steps=5, per_host=2, shift_us=shift, straggle=(3, 2, 200_000))
    clocks = {r["rank"]: r for r in s.clocks.iter_rows(named=True)}
    expected = mod.host_shift(2, shift, 2)
    assert clocks[0]["how"] == "reference clock" and clocks[0]["offset_us"] == 0
    assert clocks[1]["offset_us"] == 0 and "same host" in clocks[1]["how"]
    for r in (2, 3):
        # completions differ by at most the jitter the traces plant (< 50 µs a rank)
        assert abs(clocks[r]["offset_us"] - expected) < 50, clocks[r]
        assert clocks[r]["residual_us"] < 50 and clocks[r]["collectives"] == 5 * 4
    # aligned: no collective looks 1.25 s late, and the planted straggler is found with its own delay
    assert s.collectives.get_column("late_us").max() < 250_000
    top = s.stragglers.row(0, named=True)
    assert (top["rank"], top["step"]) == (2, 3) and 199_000 < top["late_us"] < 201_000


def test_unaligned_hosts_would_be_wrong(tmp_path):
    # the same job read back on each rank's own clock: the second host's ranks would look 1 s late
    _, s = job(tmp_path, world=4, steps=3, per_host=2, shift_us=1_000_000)
    offset = dict(s.clocks.select("rank", "offset_us").iter_rows())
    assert min(offset[2], offset[3]) > 999_000 and offset[0] == offset[1] == 0
    for r in s.collectives.iter_rows(named=True):
        own = [t + offset[k] for k, t in zip(r["rank_list"], r["issue_list"], strict=True)]
        assert max(own) - min(own) > 999_000  # on the ranks' own clocks
        assert r["late_us"] < 1_000  # aligned
