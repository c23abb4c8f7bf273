"""Configuration by environment, as pydftracer documents it, plus the DYNASCOPE_ equivalents."""

import os
from pathlib import Path

import pytest
import torch
from support.tracecheck import attrs, check, load, op_events

import dynascope
from dftracer.python import dftracer


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("DFTRACER_", "DYNASCOPE_")):
            monkeypatch.delenv(name)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def traced_call(backend):
    torch.compile(torch.nn.Linear(4, 2), backend=backend)(torch.randn(3, 4))


def test_log_file_and_data_dir_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DFTRACER_ENABLE", "1")
    monkeypatch.setenv("DFTRACER_LOG_FILE", str(tmp_path / "logs" / "envlog"))
    monkeypatch.setenv("DFTRACER_DATA_DIR", "/data/imagenet")
    monkeypatch.setenv("DFTRACER_DISABLE_IO", "1")  # no Python file I/O events
    logger = dftracer.initialize_log(None, None, -1)
    traced_call(dynascope.backend())
    (tmp_path / "read.txt").write_text("not traced", encoding="utf-8")
    logger.finalize()
    assert logger.logfile == str(tmp_path / "logs" / f"envlog-{os.getpid()}.pfw.gz")
    index = check(load(logger.logfile))
    assert index["events"][0]["args"]["data_dir"] == "/data/imagenet"
    assert op_events(index)
    assert not op_events(index, "POSIX")


def test_compression_and_metadata_switches(tmp_path, monkeypatch):
    monkeypatch.setenv("DFTRACER_ENABLE", "1")
    monkeypatch.setenv("DFTRACER_TRACE_COMPRESSION", "0")
    monkeypatch.setenv("DFTRACER_INC_METADATA", "1")
    logger = dftracer.initialize_log(str(tmp_path / "plain.pfw"), None, -1)
    traced_call(dynascope.backend(autograd=False))
    logger.finalize()
    assert logger.logfile.endswith(".pfw") and Path(logger.logfile).read_text().startswith("[\n")
    fields = attrs(check(load(logger.logfile)), op_events(check(load(logger.logfile)))[0])
    assert fields["shapes"] == "[[3,4],[2,4],[2]]"


def test_dynascope_prefix_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("DFTRACER_TRACE_COMPRESSION", "1")
    monkeypatch.setenv("DYNASCOPE_TRACE_COMPRESSION", "0")
    with dynascope.session(str(tmp_path / "t")) as session:
        traced_call(dynascope.backend())
    assert session.path.endswith(".pfw")


def test_enable_zero_means_no_instrumentation(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNASCOPE_ENABLE", "0")
    backend = dynascope.backend()
    assert not backend.enabled
    with dynascope.session(str(tmp_path / "t.pfw.gz")) as session:
        traced_call(backend)
    assert op_events(check(load(session.path))) == []


def test_drop_in_is_off_unless_enabled(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    logger = dftracer.initialize_log("quiet.pfw", None, -1)
    assert logger.session is None and logger.logfile is None
    logger.finalize()
    assert list(tmp_path.iterdir()) == []
