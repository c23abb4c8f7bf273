"""The latest benchmark results (benchmarks/results/*.json) as docs/performance.md's markdown tables:
`python benchmarks/run.py --markdown` prints them (`main`)."""

from __future__ import annotations

import json
import os

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")


def load(name: str) -> dict | None:
    path = os.path.join(RESULTS, f"{name}.json")
    return json.load(open(path)) if os.path.exists(path) else None


def capture_table(data: dict) -> str:
    lines = [
        "| case (baseline backend) | ops/call | baseline µs/call | hot path µs/op | end-to-end µs/op | disabled vs untraced | gzip B/op event |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in data["cases"]:
        lines.append(
            f"| {row['case']} ({row['baseline_backend']}) | {row['ops_per_call']} | {row['baseline_us_per_call']:.0f} "
            f"| {row['hot_path_us_per_op']:.2f} | {row['end_to_end_us_per_op']:.2f} "
            f"| {(row['disabled_ratio'] - 1) * 100:+.1f}% | {row['gz_bytes_per_op_event']:.1f} |"
        )
    writer = data["writer"]
    lines.append("")
    lines.append(f"Writer throughput (decode, format, gzip, write): {writer['events_per_s'] / 1e6:.2f} M events/s.")
    anchors = []
    if data.get("pydftracer"):
        anchors.append(f"pydftracer {data['pydftracer']['us_per_op']:.1f} µs/op")
    if data.get("torch_profiler"):
        prof = data["torch_profiler"]
        anchors.append(f"torch.profiler {prof['in_loop_us_per_op']:.2f} µs/op in the loop plus {prof['at_stop_us_per_op']:.2f} µs/op when it stops")
    if anchors:
        lines.append("Same model, same run: " + "; ".join(anchors) + ".")
    return "\n".join(lines)


def inductor_table(data: dict) -> str:
    lines = [
        "| training step | kernels/step | untraced µs/step | traced µs/step | hot path µs/kernel | step time | end-to-end µs/kernel | cold compile s | warm compile s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in data["models"]:
        compile_ = row["compile"]
        lines.append(
            f"| {row['model']} | {row['kernels_per_step']} | {row['untraced_us_per_step']:.0f} "
            f"| {row['traced_us_per_step']:.0f} | {row['hot_path_us_per_kernel']:.2f} | {row['step_ratio'] * 100:+.1f}% "
            f"| {row['end_to_end_us_per_kernel']:.2f} "
            f"| {compile_['untraced_cold_s']:.2f} → {compile_['traced_cold_s']:.2f} ({compile_['cold_ratio'] * 100:+.0f}%) "
            f"| {compile_['untraced_warm_s']:.2f} → {compile_['traced_warm_s']:.2f} ({compile_['warm_ratio'] * 100:+.0f}%) |"
        )
    cpu = [
        f"{row['model'].split(' batch')[0].rstrip(', ')} {row['compile']['untraced_cold_cpu_s']:.2f} → "
        f"{row['compile']['traced_cold_cpu_s']:.2f} s ({row['compile']['cold_cpu_ratio'] * 100:+.0f}%)"
        for row in data["models"]
        if "cold_cpu_ratio" in row["compile"]
    ]
    if cpu:
        lines.append("")
        lines.append("Cold compile, CPU time of the compiling process (C++ compiles in inductor's workers left out): " + "; ".join(cpu) + ".")
    warm = [
        f"{row['model'].split(' batch')[0].rstrip(', ')} {row['compile']['untraced_warm_no_aot_cache_s']:.2f} s "
        f"({row['compile']['warm_ratio_no_aot_cache'] * 100:+.0f}% traced)"
        for row in data["models"]
        if "untraced_warm_no_aot_cache_s" in row["compile"]
    ]
    if warm:
        lines.append("")
        lines.append("Warm compile of the untraced step with AOTAutograd's cache off, as traced compiles ran before they used it: " + "; ".join(warm) + ".")
    anchors = []
    for row in data["models"]:
        prof = row.get("torch_profiler")
        if prof:
            anchors.append(
                f"{row['model'].split(' batch')[0].rstrip(', ')}: {prof['kernel_events_per_step']:.0f} kernel events "
                f"of {prof['events_per_step']:.0f} events/step, {prof['in_loop_us_per_step']:.0f} µs/step in the loop "
                f"({prof['in_loop_us_per_kernel_event']:.2f} µs/kernel event) plus {prof['at_stop_ms']:.0f} ms when it stops "
                f"({prof['at_stop_us_per_kernel_event']:.2f} µs/kernel event)"
            )
    if anchors:
        lines.append("")
        lines.append("Same steps, same run, torch.profiler with `cpp.enable_kernel_profile`: " + "; ".join(anchors) + ".")
    return "\n".join(lines)


def analysis_table(data: dict) -> str:
    lines = [
        f"{data['op_events'] / 1e6:.0f} million op events in {data['files']} files ({data['gzip_bytes'] / 1e6:.0f} MB gzip):",
        "",
        "| read + summarise | events/s | wall s | CPU s | startup s | peak MB | vs baseline |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    baseline = next((r for r in data["rows"] if "baseline" in r["variant"]), None)
    for row in data["rows"]:
        ratio = f"{row['events_per_s'] / baseline['events_per_s']:.1f}×" if baseline else "–"
        startup = f"{row['startup_s']:.2f}" if "startup_s" in row else "–"
        lines.append(
            f"| {row['variant']} | {row['events_per_s'] / 1e6:.2f} M | {row['seconds']:.1f} | {row['cpu_s']:.1f} | {startup} "
            f"| {row['peak_mb']:.0f} | {ratio} |"
        )
    return "\n".join(lines)


def compile_profile_table(data: dict) -> str:
    """The same compile without and with a profile: each with-profile figure is a ratio to the compile
    without, by CPU time (median of the rounds; steady on a busy machine) and by wall time (best round)."""
    lines = [
        "| model (backend) | compile without profile: wall (best), CPU (median) | dynascope.compile_profile: CPU, wall | torch's Dynamo profiler: CPU, wall |",
        "|---|---:|---:|---:|",
    ]
    for row in data["cases"]:
        cells = []
        for name in ("dynascope", "torch Dynamo profiler"):
            v = row["variants"].get(name)
            cells.append(f"{v['cpu_ratio']:.3f}×, {v['best_ratio']:.3f}×" if v else "–")
        lines.append(f"| {row['model']} ({row['backend']}) | {row['plain_best_s']:.3f} s, {row['plain_cpu_s']:.3f} s "
                     f"| {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def stepping_table(data: dict) -> str:
    lines = [
        "| case | frames run decompiled | Dynamo's bytecode µs/call | decompiled µs/call | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in data["cases"]:
        lines.append(f"| {row['case']} | {row['installed']}/{row['frames']} | {row['dynamo_us_per_call']:.1f} "
                     f"| {row['stepping_us_per_call']:.1f} | {row['ratio']:.2f}× |")
    return "\n".join(lines)


MINIFIER_HOW = {
    "REPRO_AFTER=aot": "minifier, `REPRO_AFTER=aot`",
    "REPRO_AFTER=aot, hook on the backend, launcher as written": "minifier, aot hook on the backend, launcher as written",
    "REPRO_AFTER=aot, hook on the backend, launcher edited to test it": "minifier, aot hook, launcher edited to test the backend",
    "REPRO_AFTER=dynamo, backend by name": "minifier, `REPRO_AFTER=dynamo`",
}


def bisect_table(data: dict) -> str:
    lines = [
        "| model (planted bug) | tool | wall s | compilations | op found | repro ops | what it says |",
        "|---|---|---:|---:|---|---:|---|",
    ]
    for case in data["cases"]:
        model = f"{case['title']}; planted: {case['planted']}"
        for row in case["rows"]:
            tool = f"dynascope {row['how']}" if row["tool"] == "dynascope" else MINIFIER_HOW.get(row["how"], row["how"])
            if row.get("repro_size") is None:
                repro = "–"
            elif row.get("graph_size"):
                repro = f"{row['graph_size']} → {row['repro_size']}"
            else:
                repro = str(row["repro_size"])
            lines.append(
                f"| {model} | {tool} | {row['wall_s']:.1f} | {row.get('compiles', '–')} "
                f"| {'yes' if row['found'] else 'no'} | {repro} | {row.get('short', row.get('outcome', ''))} |"
            )
            model = ""
    return "\n".join(lines)


def rendered(module: str, data: dict) -> str:
    """A benchmark whose own table is already docs/performance.md's (bench_io, bench_step): its module, imported
    from benchmarks/ (sys.path's first entry under run.py)."""
    import importlib

    return importlib.import_module(module).render(data)


def main() -> int:
    io, step, breaks, warm = load("io"), load("step"), load("breaks"), load("warm_cache")
    capture, inductor = load("capture"), load("inductor")
    analysis, profile, stepping, bisect = load("analysis"), load("compile_profile"), load("stepping"), load("bisect")
    if capture:
        print(capture_table(capture), end="\n\n")
    if inductor:
        print(inductor_table(inductor), end="\n\n")
    if warm:
        import bench_warm_cache

        print(bench_warm_cache.markdown(warm), end="\n\n")
    if analysis:
        print(analysis_table(analysis), end="\n\n")
    if profile:
        print(compile_profile_table(profile), end="\n\n")
    if stepping:
        print(stepping_table(stepping), end="\n\n")
    if bisect:
        print(bisect_table(bisect), end="\n\n")
    if step:
        print(rendered("bench_step", step), end="\n\n")
    if io:
        print(rendered("bench_io", io), end="\n\n")
    if breaks:
        print(rendered("bench_breaks", breaks))
    return 0 if capture or inductor or warm or analysis or profile or stepping or bisect or step or io or breaks else 1
