"""Backend bisect against torch's minifier, on a planted bug (benchmarks/fixtures/planted_bugs.py).

Two models, each compiled with an AOT-level backend that gets one op wrong (its output x 1.5):
  linear   20 x (Linear(16,16), ReLU), batch 8: the 10th aten.relu (layer 19)
  convnet  dynascope's demo ConvNet, input 16x1x28x28: the convolution of conv2

dynascope: `dynascope.bisect(model, x, backends=(planted,), repro=DIR)` in a fresh process; wall
time of that process (imports included), its own count of compilations, whether it names the layer.

torch's minifier, in the same run, on the same bug, in fresh processes, each step the way a user
takes it (fixtures/minifier_case.py is the user's script):
  aot           TORCHDYNAMO_REPRO_AFTER=aot TORCHDYNAMO_REPRO_LEVEL=4, the backend as it is
  aot+hook      the same, the backend's forward compiler wrapped in wrap_compiler_debug (the hook
                REPRO_AFTER=aot puts around inductor only), then the minifier_launcher.py it
                writes, run as written
  aot+hook+edit the same launcher edited so that it tests the planted forward compiler instead of
                inductor's compile_fx_inner, run with `minify --no-isolate` so that the edit holds
  dynamo        TORCHDYNAMO_REPRO_AFTER=dynamo TORCHDYNAMO_REPRO_LEVEL=4, the backend by name
Wall time: all steps of a row together. Compilations: graphs handed to a compiler (the planted
compilers count their calls in a file; the stock launcher's inductor queries come from its log).
Op found: dynascope names the layer the bug is in; the op the backend gets wrong in the minifier's
minified graph is the one it gets wrong in the model (the same node), not another one.

The ConvNet is bisected twice: with every stage, and with `stages=` leaving inductor out, because
torch 2.13's inductor itself gets this model's conv gradients wrong and the bisect stops there (and
reports that bug), before it reaches the planted backend.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from common.results import publish

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MINIFIER_TIMEOUT_S = 600


def _env(count_file: str, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDYNAMO_REPRO")}
    paths = [os.path.join(ROOT, "src"), HERE] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    return {**env, "PYTHONPATH": os.pathsep.join(paths), "PLANTED_COUNT_FILE": count_file, **extra}


def _run(cmd: list[str], cwd: str, env: dict, timeout: float = MINIFIER_TIMEOUT_S) -> tuple[float, int | None, str]:
    """(wall s, exit code or None on timeout, stdout+stderr) of one fresh process."""
    started = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        return time.perf_counter() - started, done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return time.perf_counter() - started, None, out


def _counted(count_file: str) -> list[str]:
    return open(count_file).read().split("\n")[:-1] if os.path.exists(count_file) else []


def _planted_node(lines: list[str]) -> str | None:
    """The node the planted forward compiler scaled in the first graph it got: the culprit's name."""
    return next((line.split()[1] for line in lines if line.startswith("fw ") and line.split()[1] != "-"), None)


# ---------------------------------------------------------------- dynascope


def dynascope_worker(case: str, skip_inductor: bool, repro: str) -> None:
    """Runs in a fresh process: one bisect, its result as a JSON line."""
    from fixtures import planted_bugs

    import dynascope

    make_model, make_input, backend, _, _ = planted_bugs.CASES[case]
    model, x = make_model(), make_input()
    builtin = ("eager", "aot_eager", "aot_eager_decomp_partition") if skip_inductor else None
    result = dynascope.bisect(model, x, backends=(backend,), repro=repro, progress=False, stages=builtin)
    print(json.dumps(result.to_dict(), default=str))


def run_dynascope(case: str, workdir: str, skip_inductor: bool = False) -> dict:
    from fixtures import planted_bugs

    count_file = os.path.join(workdir, "count")
    repro = os.path.join(workdir, "repro")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", case, repro] + (["--skip-inductor"] if skip_inductor else [])
    wall, code, out = _run(cmd, workdir, _env(count_file))
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if code != 0 or not lines:
        return {"tool": "dynascope", "how": _how(skip_inductor), "wall_s": wall, "found": False,
                "outcome": f"failed (exit {code}): {out.strip().splitlines()[-1:] }"}  # fmt: skip
    result = json.loads(lines[-1])
    _, _, backend, layer, _ = planted_bugs.CASES[case]
    found = result["first_bad_stage"] == backend.__name__ and result.get("layer") == layer
    row = {
        "tool": "dynascope", "how": _how(skip_inductor), "wall_s": wall, "bisect_s": result["seconds"],
        "compiles": result["compiles"], "planted_compiles": sum(1 for c in _counted(count_file) if c == "dynamo"),
        "first_bad_stage": result["first_bad_stage"], "kind": result["kind"], "op": result.get("target"),
        "node": result.get("node"), "layer": result.get("layer"), "found": found,
        "graph_size": result["graph_size"], "repro_size": result["repro_size"],
        "inductor_subsystem": result.get("inductor_subsystem"), "where": result.get("where"),
        "stages": [(s["stage"], s["status"]) for s in result["stages"]],
    }  # fmt: skip
    if found:
        row["outcome"] = f"names {result.get('target')} in layer {result.get('layer')}"
        row["short"] = f"names `{result.get('target')}`, layer {result.get('layer')}"
    elif result["first_bad_stage"]:
        detail = next((s["detail"] for s in result["stages"] if s["status"] != "ok"), "")
        row["outcome"] = f"stops at stage {result['first_bad_stage']} ({result['kind']}: {detail})" + (
            "" if result.get("target") else "; no op isolated")
        row["short"] = f"stops at stage {result['first_bad_stage']}: `{detail.split(':')[0]}` differs; " + (
            f"names `{result['target']}`" + (f", layer {result['layer']}" if result.get("layer") else "")
            if result.get("target") else "no op isolated")
        if result.get("inductor_subsystem"):
            row["short"] += f"; narrowed to {result['inductor_subsystem'].split(' ')[0]}"
    else:
        row["outcome"] = row["short"] = "every stage agrees"
    if result.get("repro"):
        _, repro_code, repro_out = _run([sys.executable, os.path.join(result["repro"], "repro.py")], workdir,
                                        _env(os.path.join(workdir, "count-repro")), timeout=300)  # fmt: skip
        row["repro_exit"] = repro_code
        row["repro_says"] = repro_out.strip().splitlines()[-1] if repro_out.strip() else ""
    return row


def _how(skip_inductor: bool) -> str:
    return "bisect, stages= without inductor" if skip_inductor else "bisect (all stages)"


# ---------------------------------------------------------------- torch's minifier


def _user_run(case: str, how: str, after: str, workdir: str, count_file: str) -> tuple[float, int | None, str, dict]:
    script = os.path.join(HERE, "fixtures", "minifier_case.py")
    env = _env(count_file, TORCHDYNAMO_REPRO_AFTER=after, TORCHDYNAMO_REPRO_LEVEL="4")
    wall, code, out = _run([sys.executable, script, case, how], workdir, env)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return wall, code, out, (json.loads(lines[-1]) if lines else {})


def _launcher(workdir: str) -> str | None:
    for root, _, files in os.walk(workdir):
        if "minifier_launcher.py" in files:
            return os.path.join(root, "minifier_launcher.py")
    return None


def _last_message(out: str) -> str:
    """The line a user reads last: the final error or the minifier's own summary."""
    keep = [line.strip() for line in out.splitlines() if line.strip() and not line.startswith((" ", "\t", ">>"))]
    for line in reversed(keep):
        if re.match(r"^(\w+Error|RuntimeError|Wrote minimal repro|Made \d+ queries)", line):
            return line[:160]
    return keep[-1][:160] if keep else ""


def _graph_ops(path: str) -> list[tuple[str, str]]:
    """(node name, aten op) of each computing node of the forward() of a repro the minifier wrote."""
    with open(path) as handle:
        text = handle.read()
    body = text.split("def forward(", 1)[1].split("\ndef ", 1)[0] if "def forward(" in text else ""
    return re.findall(r"^\s+(\w+) = torch\.ops\.(aten\.\w+)", body, re.M)


def _culprit(case: str, ops: list[tuple[str, str]], planted: str | None) -> str | None:
    """The node the planted backend gets wrong in a minified graph: for the linear model its 10th relu
    (the bug is positional), for the ConvNet conv2's convolution, by name."""
    if case == "linear":
        relus = [name for name, op in ops if op == "aten.relu"]
        return relus[9] if len(relus) >= 10 else None
    return planted if planted in {name for name, _ in ops} else None


def minifier_plain(case: str, workdir: str) -> dict:
    count_file = os.path.join(workdir, "count")
    wall, _, _, outcome = _user_run(case, "plain", "aot", workdir, count_file)
    counted = _counted(count_file)
    launcher = _launcher(workdir)
    said = outcome.get("raised") or "runs to the end, says nothing"
    return {"tool": "torch minifier", "how": "REPRO_AFTER=aot", "wall_s": wall,
            "compiles": sum(1 for c in counted if c.startswith("fw")), "found": False,
            "outcome": said + ("" if launcher else "; writes no repro (the aot hook wraps inductor only)"),
            "short": "silent" if not outcome.get("raised") and not launcher else said}  # fmt: skip


def minifier_hooked(case: str, workdir: str, edit: bool) -> dict:
    from fixtures import planted_bugs

    count_file = os.path.join(workdir, "count")
    wall, _, _, outcome = _user_run(case, "wrapped", "aot", workdir, count_file)
    planted = _planted_node(_counted(count_file))
    how = "REPRO_AFTER=aot, hook on the backend" + (", launcher edited to test it" if edit else ", launcher as written")
    row: dict = {"tool": "torch minifier", "how": how, "detect_s": wall, "detect_says": outcome.get("raised"),
                 "planted_node": planted, "found": False}  # fmt: skip
    launcher = _launcher(workdir)
    if launcher is None:
        row.update(wall_s=wall, compiles=len([c for c in _counted(count_file) if c.startswith("fw")]),
                   outcome=f"{outcome.get('raised') or 'no accuracy failure seen'}; no launcher written",
                   short="no launcher written")  # fmt: skip
        return row
    cmd = [sys.executable, launcher]
    if edit:
        fw = f"planted_bugs.CASES[{case!r}][2].fw_compiler"
        with open(launcher) as handle:
            text = handle.read()
        at = text.index("\nimport torch\n") + len("\nimport torch\n")
        patch = ("from fixtures import planted_bugs\nimport torch._inductor.compile_fx\n"
                 f"torch._inductor.compile_fx.compile_fx_inner = lambda gm, example_inputs, **kw: {fw}(gm, example_inputs)\n")  # fmt: skip
        with open(launcher, "w") as handle:
            handle.write(text[:at] + patch + text[at:])
        cmd += ["minify", "--no-isolate"]
    before = len(_counted(count_file))
    minify_s, minify_code, minify_out = _run(cmd, workdir, _env(count_file))
    queries = re.search(r"Made (\d+) queries", minify_out)
    # the stock launcher compiles with inductor: its queries; the edited one: the planted compiler's calls
    minify_compiles = len(_counted(count_file)) - before if edit else (int(queries.group(1)) if queries else 1)
    row.update(wall_s=wall + minify_s, minify_s=minify_s, minify_exit=minify_code,
               compiles=1 + minify_compiles, queries=int(queries.group(1)) if queries else None)  # fmt: skip
    said = _last_message(minify_out) if minify_code is not None else f"timed out after {MINIFIER_TIMEOUT_S} s"
    short = f"detects; launcher: {said}"
    repro = os.path.join(workdir, "repro.py")
    if minify_code == 0 and queries and os.path.exists(repro):
        ops = _graph_ops(repro)
        culprit = _culprit(case, ops, planted)
        row.update(repro_size=len(ops), repro_culprit=culprit, found=planted is not None and culprit == planted)
        target = planted_bugs.CASES[case][4]
        said = f"minified to {len(ops)} ops; " + (
            f"the op the backend gets wrong there is {planted} ({target})" if row["found"]
            else f"the op the backend gets wrong there is {culprit}, not {planted}: it drifted")  # fmt: skip
        short = f"minified to {len(ops)} op{'s' if len(ops) != 1 else ''}; the op wrong there is `{culprit}`" + (
            "" if row["found"] else f", not the model's `{planted}`")
    row["outcome"] = f"detects ({outcome.get('raised')}); launcher: {said}"
    row["short"] = short
    return row


def minifier_dynamo(case: str, workdir: str) -> dict:
    count_file = os.path.join(workdir, "count")
    wall, _, out, outcome = _user_run(case, "named", "dynamo", workdir, count_file)
    skipped = "likely an unrelated issue" in out
    error = re.search(r"^\S.*?\] \[[^\]]*\] (\w+Error: [^:']*)", out, re.M)
    said = outcome.get("raised") or "runs to the end"
    if skipped:
        said += "; its accuracy check fails inside torch" + (f" ({error.group(1)})" if error else "") + ", 'Skipping this graph'"
    short = "silent"
    if skipped:
        short = f"its accuracy check fails inside torch ({error.group(1).split(':')[0] if error else 'an error'})"
    if outcome.get("raised"):
        short += f"; the run raises {outcome['raised'].split(':')[0]}"
    return {"tool": "torch minifier", "how": "REPRO_AFTER=dynamo, backend by name", "wall_s": wall,
            "compiles": sum(1 for c in _counted(count_file) if c == "dynamo"), "found": False,
            "outcome": said + ("" if _launcher(workdir) else "; writes no repro"),
            "short": short + ("" if _launcher(workdir) else "; nothing written")}  # fmt: skip


# ---------------------------------------------------------------- report


def render(results: dict) -> str:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=180, record=True, file=io.StringIO())
    for case in results["cases"]:
        table = Table(title=f"{case['title']}: planted bug in {case['planted']}", show_lines=False)
        for column in ("tool", "how", "wall s", "compilations", "op found", "repro ops", "what it says"):
            table.add_column(column, justify="right" if column in ("wall s", "compilations", "repro ops") else "left",
                             overflow="fold")  # fmt: skip
        for row in case["rows"]:
            table.add_row(row["tool"], row["how"], f"{row['wall_s']:.1f}", str(row.get("compiles", "–")),
                          "yes" if row["found"] else "no", _repro_cell(row), row.get("outcome", ""))  # fmt: skip
        console.print(table)
    console.print(f"torch {results['torch']}, python {results['python']}, {results['threads']} threads; "
                  f"minifier steps time out after {MINIFIER_TIMEOUT_S} s; load average "
                  f"{results['load_before'][0]:.1f} before, {results['load_after'][0]:.1f} after")  # fmt: skip
    return console.export_text()


def _repro_cell(row: dict) -> str:
    if row.get("repro_size") is None:
        return "–"
    return f"{row['graph_size']} → {row['repro_size']}" if row.get("graph_size") else str(row["repro_size"])


TITLES = {
    "linear": "20 x (Linear(16,16), ReLU), batch 8",
    "convnet": "demo ConvNet, 16x1x28x28",
}
PLANTED = {"linear": "the 10th aten.relu (layer 19)", "convnet": "conv2's aten.convolution"}


def measure(case: str, quick: bool) -> dict:
    rows = []
    steps = [("dynascope", lambda d: run_dynascope(case, d))]
    if case == "convnet":
        steps.append(("dynascope-no-inductor", lambda d: run_dynascope(case, d, skip_inductor=True)))
    steps += [
        ("aot", lambda d: minifier_plain(case, d)),
        ("aot-hook", lambda d: minifier_hooked(case, d, edit=False)),
        ("aot-hook-edit", lambda d: minifier_hooked(case, d, edit=True)),
        ("dynamo", lambda d: minifier_dynamo(case, d)),
    ]
    for name, step in steps:
        with tempfile.TemporaryDirectory(prefix=f"bisect-{case}-{name}-") as workdir:
            print(f"[bench_bisect] {case}: {name} ...", file=sys.stderr, flush=True)
            row = step(workdir)
            print(f"[bench_bisect] {case}: {name}: {row['wall_s']:.1f} s, {row.get('compiles')} compilations, "
                  f"found={row['found']}: {row.get('outcome', '')}", file=sys.stderr, flush=True)  # fmt: skip
            rows.append(row)
    return {"case": case, "title": TITLES[case], "planted": PLANTED[case], "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the linear model only, for a smoke run")
    parser.add_argument("--cases", nargs="+", choices=sorted(TITLES), default=None)
    parser.add_argument("--json", default=os.path.join(HERE, "results", "bisect.json"))
    parser.add_argument("--worker", nargs=2, metavar=("CASE", "REPRO"), help=argparse.SUPPRESS)
    parser.add_argument("--skip-inductor", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        dynascope_worker(args.worker[0], args.skip_inductor, args.worker[1])
        return 0
    import torch

    cases = args.cases or (["linear"] if args.quick else ["linear", "convnet"])
    results: dict = {"torch": torch.__version__, "python": sys.version.split()[0], "threads": torch.get_num_threads(),
                     "cpus": os.cpu_count(), "quick": args.quick, "load_before": os.getloadavg(), "cases": []}  # fmt: skip
    for case in cases:
        results["cases"].append(measure(case, args.quick))
    results["load_after"] = os.getloadavg()  # a shared machine: how busy it was (1, 5, 15 min)
    publish(render(results), results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
