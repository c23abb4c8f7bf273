"""Readable guard text from torch 2.13's guard strings (recorded), no compile needed."""

from dynascope.explain.guards import group_guards, readable_check, readable_source
from dynascope.explain.torch_records import graph_break, parse_failure, split_reasons


def test_readable_sources():
    assert readable_source("L['self']._modules['layers']._modules['0']._parameters['weight']") == "self.layers[0].weight"
    assert readable_source("G['__import_torch_dot_nn_dot_modules_dot_linear'].F.linear") == "torch.nn.modules.linear.F.linear"
    assert readable_source("G['__builtins_dict___0']['iter']") == "iter"
    assert readable_source("L['opts']['reduce']") == "opts['reduce']"


def test_readable_checks():
    assert readable_check("TENSOR_MATCH", "check_tensor(L['a'], Tensor, DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, "
                          "AutogradCPU), torch.float32, device=None, requires_grad=False, size=[10], stride=[1])") == \
        "a: Tensor, dtype float32, shape [10], stride [1], requires_grad=False, device cpu"
    assert readable_check("TENSOR_MATCH", "check_tensor(L['x'], Tensor, DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, "
                          "AutogradCPU), torch.float64, device=None, requires_grad=True, size=[None, 8], stride=[8, 1])") == \
        "x: Tensor, dtype float64, shape [any, 8], stride [8, 1], requires_grad=True, device cpu"
    assert readable_check("ID_MATCH", "___check_obj_id(G['torch'], 140260615133104), type=<class 'module'>") == \
        "torch is the same object as at compile time (module)"
    # torch 2.9 .. 2.12 append the object's repr instead of its type
    assert readable_check("ID_MATCH", "___check_obj_id(G['torch'], 140137805423824), type=<module 'torch' from "
                          "'/site-packages/torch/__init__.py'>") == "torch is the same object as at compile time (module)"
    assert readable_check("ID_MATCH", "___check_obj_id(L['self'].fc, 1401), type=Linear(in_features=3,\n"
                          "  out_features=4, bias=True)") == "self.fc is the same object as at compile time (Linear)"
    assert readable_check("TYPE_MATCH", "___check_type_id(L['self'], 93934724608240), type=<class '__main__.M'>") == \
        "type(self) is __main__.M"
    text = readable_check("GLOBAL_STATE", '___check_global_state() against {"grad_mode":false,"num_threads":4,'
                          '"default_dtype":6,"autocast_state":{"enabled":[false,true]}}')
    assert text == ("torch global state is as at compile time: grad_mode=False, default dtype float32, num_threads=4, "
                    "autocast on")
    assert readable_check("EQUALS_MATCH", "L['n'] == 2") == "n == 2"
    assert readable_check("NO_TENSOR_ALIASING", "check_no_aliasing(L['a'], L['b'], L['c'])") == \
        "a, b and c are different tensors (no aliasing)"
    assert readable_check("DICT_CONTAINS", "not ___dict_contains('forward', L['self']._modules['lin'].__dict__)") == \
        "'forward' not in self.lin.__dict__"
    assert readable_check("LENGTH_CHECK", "len(L['ys']) == 2") == "len(ys) == 2"
    assert readable_check("DICT_KEYS", "list(dict.keys(L['self']._modules))[0] == 'lin'") == \
        "key #0 of self._modules is 'lin'"


def test_grouping_with_user_lines_and_markers():
    tree = [
        {"source": None, "guards": [
            {"kind": "DEFAULT_DEVICE", "fail_count": 0,
             "parts": ["utils_device.CURRENT_DEVICE == None      # _dynamo/output_graph.py:1122 in init_ambient_guards"]},
            {"kind": "SHAPE_ENV", "fail_count": 0, "parts": ["L['b'].size()[0] == L['a'].size()[0]"]},
        ]},
        {"source": "L['a']", "guards": [
            {"kind": "TENSOR_MATCH", "fail_count": 2, "parts": [(
                "check_tensor(L['a'], Tensor, DispatchKeySet(CPU), torch.float32, device=None, requires_grad=False, "
                "size=[10], stride=[1])  # x = a / (torch.abs(a) + 1)  # ex/p1.py:3 in toy_example")]},
            {"kind": "DIMENSION_DYNAMIC_MARKING_GUARD", "fail_count": 0, "parts": [
                "hasattr(L['a'], '_dynamo_dynamic_indices') == False   # x = a  # ex/p1.py:3 in toy_example",
                "hasattr(L['a'], '_dynamo_static_indices') == False   # x = a  # ex/p1.py:3 in toy_example"]},
        ]},
    ]
    groups, count = group_guards(tree, "/tmp/ex/p1.py")
    assert count == 5
    assert groups[0].subject == "global state"
    a = next(g for g in groups if g.subject == "a")
    assert [g.text for g in a.guards] == [
        "a: Tensor, dtype float32, shape [10], stride [1], requires_grad=False, device cpu",
        "a has no dynamic-shape markings (mark_dynamic & co.)",
    ]
    assert a.guards[0].user_line.file == "/tmp/ex/p1.py" and a.guards[0].user_line.line == 3
    assert a.guards[0].fail_count == 2
    state = next(g for g in groups if g.subject == "global state")
    assert state.guards[0].user_line is None  # torch's own ambient guard, not a user line
    b = next(g for g in groups if g.subject == "b")
    assert b.guards[0].text == "b.size()[0] == a.size()[0]"


def test_recompile_reasons_parsed():
    payload = ('[\n"2/1: ___check_type_id(n, 139823837183200), type=<class \'int\'>  # return x * n  # ex/p6.py:11 in g '
               '(HINT: type int)\\nUser stack trace:\\n  File \\"/tmp/ex/p6.py\\", line 11, in g\\n    return x * n",\n'
               '"2/0: n == 2                                                   # return x * n  # ex/p6.py:11 in g"\n]')
    texts = split_reasons(payload)
    assert len(texts) == 2
    first, second = (parse_failure(t) for t in texts)
    assert (first.compile_id, first.reason, first.subject) == ("2/1", "guard failed: type(n) is int", "n")
    assert (second.compile_id, second.reason, second.subject, second.expected) == ("2/0", "guard failed: n == 2", "n", "2")
    f = parse_failure("0/0: tensor 'L['a']' size mismatch at index 0. expected 10, actual 20")
    assert (f.reason, f.subject, f.expected, f.actual) == (
        "tensor 'a' size mismatch at index 0. expected 10, actual 20", "a", "10", "20")


def test_graph_break_payload_parsed(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f(x):\n    y = x + 1\n    print('hi')\n    return y\n")
    payload = (f"Graph break in user code at {src}:3\n"
               "Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call:\n\n"
               "Failed to trace builtin operator\n"
               "  Explanation: Dynamo does not know how to trace builtin operator `print`\n"
               "  Developer debug context: builtin print\n\n"
               "User code traceback:\n"
               f'  File "{src}", line 3, in f\n'
               "    print('hi')\n\n"
               "Traceback (most recent call last):\n  File \"x\", line 1")
    gb = graph_break(payload, "0/0")
    assert (gb.reason, gb.function, gb.file, gb.line) == ("Failed to trace builtin operator", "f", str(src), 3)
    assert gb.excerpt == "3     print('hi')"
    assert "Explanation: Dynamo does not know" in gb.detail and "Developer debug context" not in gb.detail
    assert gb.compile_ids == ["0/0"]


def test_terminal_guard_limit_counts_the_rest():
    from dynascope.artifacts.explanation import CacheEntry, Guard, GuardGroup
    from dynascope.render.explanation_text import render_guards

    entry = CacheEntry(index=1, compile_id="0/0", backend=None, guard_count=5, guards=[
        GuardGroup("self", "L['self']", [Guard("TYPE_MATCH", f"check {i}", "raw") for i in range(5)])])
    assert render_guards(entry, limit=2).splitlines() == ["# self", "check 0", "check 1", "... and 3 more checks on self"]
    assert len(render_guards(entry).splitlines()) == 6


def test_hint_suffix_dropped():
    assert readable_check("TYPE_MATCH", "___check_type_id(args, 140224034628480), type=<class 'tuple'> (HINT: type tuple)") \
        == "type(args) is tuple"


def test_graph_break_that_skipped_the_frame():
    payload = ("Graph break in user code at /x/m.py:7\n"
               "Graph Break Reason: Failed to handle graph break gracefully. Skipping the function and falling back "
               "to eager. Graph break encountered:\n\nData-dependent branching\n  Explanation: Detected ...\n\n"
               "*** While handling this graph break, another graph break occurred: ***\n\ngraph break in loop\n"
               "  Explanation: torch.compile detected a graph break in a for/while loop.\n")
    gb = graph_break(payload, "0/0")
    assert gb.reason == "Data-dependent branching (the whole function fell back to eager: graph break in loop)"
    assert (gb.file, gb.line) == ("/x/m.py", 7)
