"""Every code example of the two pydftracer guides (seeds 000 and 001) runs verbatim on the drop-in.

Each example is its own script under examples/, run in a fresh process with DFTRACER_ENABLE=1.
"""

import os

import pytest
from support.tracecheck import attrs, check, load, op_events, run_script, trace_files

EXAMPLES = os.path.join(os.path.dirname(__file__), "examples")


def run_example(name: str, tmp_path) -> dict:
    result = run_script(os.path.join(EXAMPLES, name), cwd=str(tmp_path), env={"DFTRACER_ENABLE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    files = trace_files(str(tmp_path))
    assert len(files) == 1, files
    return {"file": files[0], "stderr": result.stderr, **check(load(files[0]))}


def names(index):
    return {e["name"] for e in op_events(index)}


def phases(index):
    return {attrs(index, e)["phase"] for e in op_events(index)}


def test_decorator_on_forward_method(tmp_path):
    index = run_example("seed000_decorator_basic.py", tmp_path)
    assert os.path.basename(index["file"]).startswith("dynamo_trace-") and index["file"].endswith(".pfw.gz")
    assert {"function.convolution.default", "function.relu.default", "function.max_pool2d_with_indices.default",
            "function.addmm.default"} <= names(index)  # fmt: skip
    conv = next(e for e in op_events(index) if e["name"] == "function.convolution.default")
    assert attrs(index, conv)["layer"] == "conv" and attrs(index, conv)["module_type"] == "Conv2d"


def test_create_backend_with_every_parameter(tmp_path):
    index = run_example("seed000_create_backend.py", tmp_path)
    addmm = [e for e in op_events(index) if e["name"] == "function.addmm.default"]
    assert len(addmm) == 2
    fields = attrs(index, addmm[0])
    assert (fields["tracer"], fields["epoch"], fields["step"]) == ("resnet50", 1, 100)
    assert fields["phase"] == "forward" and fields["compile_id"] == "0/0"


def test_custom_tracer_on_free_function_without_initialize(tmp_path):
    index = run_example("seed000_custom_tracer.py", tmp_path)
    assert "no trace session was started" in index["stderr"]
    relu = next(e for e in op_events(index) if e["name"] == "function.relu.default")
    fields = attrs(index, relu)
    assert fields["image_idx"] == 42 and fields["image_size"] == [224, 224] and fields["tracer"] == "resnet50"


def test_training_loop_with_a_backend_per_epoch(tmp_path):
    index = run_example("seed000_training_create_backend.py", tmp_path)
    epochs = {attrs(index, e).get("epoch") for e in op_events(index)}
    assert epochs == {0, 1, 2, 3, 4}
    assert phases(index) == {"forward", "backward"}
    assert "function.convolution_backward.default" in names(index)
    calls = [e for e in op_events(index, "dynamo.graph") if attrs(index, e)["phase"] == "forward"]
    assert len(calls) == 10  # 5 epochs x 2 batches


def test_training_loop_with_decorator(tmp_path):
    index = run_example("seed000_training_decorator.py", tmp_path)
    assert phases(index) == {"forward", "backward"}
    backward = [e for e in op_events(index) if attrs(index, e)["phase"] == "backward"]
    layers = {attrs(index, e)["layer"] for e in backward}
    assert {"conv1", "conv2", "fc1", "fc2"} <= layers  # backward ops inherit their forward layer


def test_dftracer_dynamo_backend(tmp_path):
    index = run_example("seed001_dftracer_dynamo_backend.py", tmp_path)
    layers = {attrs(index, e)["layer"] for e in op_events(index) if e["name"] == "function.addmm.default"}
    assert layers == {"layers.0", "layers.2"}


def test_custom_tracer_used_as_backend(tmp_path):
    index = run_example("seed001_custom_tracer.py", tmp_path)
    assert os.path.basename(index["file"]).startswith("custom-")
    assert phases(index) == {"forward", "backward"}


@pytest.mark.parametrize("example", ["seed000_decorator_basic.py", "seed001_dftracer_dynamo_backend.py"])
def test_disabled_writes_nothing(tmp_path, example):
    result = run_script(os.path.join(EXAMPLES, example), cwd=str(tmp_path), env={"DFTRACER_ENABLE": "0"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert trace_files(str(tmp_path)) == []
