"""pydftracer's region helper `dft_fn` on dynascope regions: op events nest under its events."""

import os

import pytest
import torch
from support.tracecheck import check, load, op_events

from dftracer.python import dft_fn, dftracer, dynamo


@pytest.fixture
def logger(tmp_path, monkeypatch):
    monkeypatch.setenv("DFTRACER_ENABLE", "1")
    torch._dynamo.reset()
    logger = dftracer.initialize_log(str(tmp_path / "regions.pfw"), None, -1)
    yield logger
    if not logger.session.closed:
        logger.finalize()
    torch._dynamo.reset()


def test_decorator_context_manager_and_iterator(logger):
    compute = dft_fn("compute")
    model = torch.nn.Linear(4, 2)

    @dynamo.compile
    def forward(x):
        return model(x)

    class Trainer:
        epoch = 7

        @compute.log
        def train_step(self, batch, step=0):
            return forward(batch).sum()

    trainer = Trainer()
    loader = dft_fn("data", name="loader")
    for step, batch in enumerate(loader.iter([torch.randn(3, 4) for _ in range(3)])):
        with dft_fn("pipeline", name="step", step=step):
            trainer.train_step(batch, step=step)
    logger.finalize()
    index = check(load(logger.logfile))
    by_id = {e["id"]: e for e in index["events"]}
    steps = [e for e in index["events"] if e["name"] == "Trainer.train_step"]
    assert [(e["args"]["epoch"], e["args"]["step"]) for e in steps] == [(7, 0), (7, 1), (7, 2)]
    assert all(by_id[e["args"]["p_idx"]]["name"] == "step" for e in steps)
    assert len([e for e in index["events"] if e["name"] == "loader.iter"]) == 3
    graphs = op_events(index, "dynamo.graph")
    assert graphs and all(by_id[g["args"]["p_idx"]]["name"] == "Trainer.train_step" for g in graphs)


def test_log_event_and_get_time(logger):
    start = logger.get_time()
    logger.log_event("custom", "app", start, 5, int_args={"bytes": 10}, string_args={"who": "me"})
    logger.finalize()
    custom = next(e for e in check(load(logger.logfile))["events"] if e["name"] == "custom")
    assert custom["ts"] == start and custom["dur"] == 5 and custom["args"]["bytes"] == 10
    assert os.path.basename(logger.logfile) == f"regions-{os.getpid()}.pfw.gz"
