"""A warm-cache run under `dynascope run` against the same plain run (issue 25, defect 8).

The program is a small nanoGPT-style training loop (a 2-layer GPT on random tokens, AdamW, plain
torch.compile, CPU). Every run is a fresh process sharing one inductor cache directory that two runs
warmed first (one plain, one traced: traced compiles keep inductor entries of their own, since they
switch on kernel provenance). Per round, taking turns: the plain run (`python train.py`), the traced run
(`dynascope run train.py`, with its explanation and report), and the traced run as it was before traced
compiles used AOTAutograd's cache (TORCHINDUCTOR_AUTOGRAD_CACHE=0). Figures: step 0 (compile-bound),
the later steps together, and the whole process (imports, and under dynascope its
explanation and report), in wall-clock time and, steadier on a shared machine, CPU time (step 0: the
process's, all its threads; whole process: it and the children it waited for), median over rounds; ratios to plain.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

from common.results import publish

SCRIPT = textwrap.dedent('''
    import json, os, sys, time
    import torch
    import torch.nn as nn
    from torch.nn import functional as F

    torch.set_num_threads(1)


    class Block(nn.Module):
        def __init__(self, n_embd, n_head):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = nn.Linear(n_embd, 3 * n_embd)
            self.proj = nn.Linear(n_embd, n_embd)
            self.ln_2 = nn.LayerNorm(n_embd)
            self.fc = nn.Linear(n_embd, 4 * n_embd)
            self.fc_proj = nn.Linear(4 * n_embd, n_embd)
            self.n_head = n_head

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
            return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x))))


    class GPT(nn.Module):
        def __init__(self, vocab=256, block=32, n_layer=2, n_head=4, n_embd=64):
            super().__init__()
            self.wte = nn.Embedding(vocab, n_embd)
            self.wpe = nn.Embedding(block, n_embd)
            self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)

        def forward(self, idx, targets):
            pos = torch.arange(idx.size(1), device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


    torch.manual_seed(0)
    model = torch.compile(GPT())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps = []
    for step in range(int(sys.argv[1])):
        x = torch.randint(0, 256, (8, 32))
        y = torch.randint(0, 256, (8, 32))
        t0, c0 = time.perf_counter(), time.process_time()
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steps.append(time.perf_counter() - t0)
        if step == 0:
            step0_cpu = time.process_time() - c0
    from torch._dynamo.utils import counters
    print("WARMBENCH " + json.dumps({"step0_s": steps[0], "step0_cpu_s": step0_cpu, "later_steps_s": sum(steps[1:]),
                                     "aot": dict(counters["aot_autograd"])}), file=sys.stderr)
''')

VARIANTS = ("plain", "traced", "traced, AOTAutograd cache off")
FIGURES = ("step0_s", "step0_cpu_s", "later_steps_s", "process_s", "process_cpu_s")


def run_once(variant: str, workdir: str, cache: str, steps: int) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "OMP_NUM_THREADS": "1"}
    env.pop("TORCHINDUCTOR_AUTOGRAD_CACHE", None)
    script = os.path.join(workdir, "train.py")
    if variant == "plain":
        command = [sys.executable, script, str(steps)]
    else:
        command = [sys.executable, "-m", "dynascope.cli", "run", "--out", os.path.join(workdir, "out"), script,
                   str(steps)]  # fmt: skip
        if variant != "traced":
            env["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
    start, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=900, check=False)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    if result.returncode != 0:
        raise RuntimeError(f"{variant} run failed:\n{result.stderr[-3000:]}")
    line = next(line for line in result.stderr.splitlines() if line.startswith("WARMBENCH "))
    return {**json.loads(line.removeprefix("WARMBENCH ")), "process_s": wall, "process_cpu_s": cpu}


def measure(rounds: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as workdir:
        with open(os.path.join(workdir, "train.py"), "w") as handle:
            handle.write(SCRIPT)
        cache = os.path.join(workdir, "inductor-cache")
        warming = {variant: run_once(variant, workdir, cache, steps) for variant in ("plain", "traced")}
        runs: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
        for _ in range(rounds):
            for variant in VARIANTS:
                runs[variant].append(run_once(variant, workdir, cache, steps))
    rows = []
    plain = {key: statistics.median(r[key] for r in runs["plain"]) for key in FIGURES}
    for variant in VARIANTS:
        medians = {key: statistics.median(r[key] for r in runs[variant]) for key in FIGURES}
        rows.append({"variant": variant, **medians, **{f"{key}_ratio": medians[key] / plain[key] for key in plain},
                     "aot_cache_hits": runs[variant][-1]["aot"].get("autograd_cache_hit", 0),
                     "aot_cache_misses": runs[variant][-1]["aot"].get("autograd_cache_miss", 0)})  # fmt: skip
    return {"rounds": rounds, "steps": steps, "cold": warming, "rows": rows, "runs": runs}


def render(results: dict) -> str:
    title = (f"warm-cache runs: nanoGPT-style 2-layer GPT, {results['steps']} steps, fresh process each, "
             f"median of {results['rounds']} rounds (ratios to the plain run)")
    header = (f"{'run':<32}{'step 0 s':>9}{'ratio':>7}{'CPU s':>7}{'ratio':>7}{'later s':>9}{'process s':>11}"
              f"{'ratio':>7}{'CPU s':>7}{'ratio':>7}{'AOT hits':>10}")
    lines = [title, header]
    for row in results["rows"]:
        lines.append(f"{row['variant']:<32}{row['step0_s']:>9.2f}{row['step0_s_ratio']:>7.2f}"
                     f"{row['step0_cpu_s']:>7.2f}{row['step0_cpu_s_ratio']:>7.2f}{row['later_steps_s']:>9.3f}"
                     f"{row['process_s']:>11.2f}{row['process_s_ratio']:>7.2f}{row['process_cpu_s']:>7.2f}"
                     f"{row['process_cpu_s_ratio']:>7.2f}{row['aot_cache_hits']:>10}")  # fmt: skip
    return "\n".join(lines)


def markdown(results: dict) -> str:
    """docs/performance.md's table (common/markdown.py prints it: `run.py --markdown`)."""
    header = ("| warm-cache run (fresh process) | step 0: wall s | CPU s | vs plain (wall, CPU) | whole process: wall s "
              "| CPU s | vs plain (wall, CPU) | AOTAutograd cache hits |")
    lines = [header, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in results["rows"]:
        lines.append(f"| {row['variant']} | {row['step0_s']:.2f} | {row['step0_cpu_s']:.2f} | "
                     f"{row['step0_s_ratio']:.2f}×, {row['step0_cpu_s_ratio']:.2f}× | {row['process_s']:.2f} | "
                     f"{row['process_cpu_s']:.2f} | {row['process_s_ratio']:.2f}×, {row['process_cpu_s_ratio']:.2f}× "
                     f"| {row['aot_cache_hits']} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="two rounds of three steps")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "warm_cache.json"))
    args = parser.parse_args(argv)
    rounds, steps = (2, 3) if args.quick else (args.rounds, args.steps)
    results = measure(rounds, steps)
    import torch

    results["torch"] = torch.__version__
    results["machine"] = f"{os.cpu_count()} CPUs, shared"
    publish(render(results), results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
