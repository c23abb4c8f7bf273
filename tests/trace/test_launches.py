"""Which op launched a device activity: the join of launch instants to a thread's graph-call readings."""

import numpy as np

from dynascope.trace.launches import LaunchIndex
from dynascope.trace.ops import TABLE, OpSpec


def graph(n_ops):
    spec = OpSpec.make("g", "dynamo.graph", True, {})
    ops = [OpSpec.make(f"op{k}", "dynamo", True, {"k": k}) for k in range(n_ops)]
    gid = TABLE.register_graph(spec, ops)
    return gid, TABLE.graph_specs(gid)[1:]


def test_a_launch_belongs_to_the_op_whose_interval_holds_it():
    gid, ops = graph(3)
    index = LaunchIndex()
    # two calls: start 100, ops end at 110, 120, 130; start 200, ops end at 205, 260, 270
    index.add(7, np.array([-gid, 100, 110, 120, 130], dtype=np.int64))
    index.add(7, np.array([-gid, 200, 205, 260, 270], dtype=np.int64))
    at = np.array([105, 110, 119, 125, 150, 199, 201, 230, 269, 300, 50], dtype=np.int64)
    found = index.launchers(7, at).tolist()
    assert found == [ops[0], ops[1], ops[1], ops[2], -1, -1, ops[0], ops[1], ops[2], -1, -1]
    assert index.launchers(8, at).tolist() == [-1] * len(at)  # another thread launched nothing traced


def test_runs_cut_anywhere_and_added_out_of_order_join_the_same():
    gid, ops = graph(2)
    whole = LaunchIndex()
    whole.add(1, np.array([-gid, 10, 20, 30, -gid, 40, 50, 60], dtype=np.int64))
    cut = LaunchIndex()
    cut.add(1, np.array([-gid, 40, 50, 60], dtype=np.int64))  # a later call formatted first
    cut.add(1, np.array([-gid, 10, 20, 30], dtype=np.int64))
    at = np.arange(0, 70, 3, dtype=np.int64)
    assert whole.launchers(1, at).tolist() == cut.launchers(1, at).tolist()
    assert {ops[0], ops[1]} <= set(whole.launchers(1, at).tolist())


def test_forgetting_drops_only_runs_that_ended_before():
    gid, ops = graph(1)
    index = LaunchIndex()
    index.add(1, np.array([-gid, 10, 20], dtype=np.int64))
    index.add(1, np.array([-gid, 30, 40], dtype=np.int64))
    index.forget_before(25)
    assert index.launchers(1, np.array([15, 35], dtype=np.int64)).tolist() == [-1, ops[0]]
