"""A traced training workload whose ending the durability tests choose: workload.py MODE OUT_DIR."""

import os
import sys
import threading
import time

import torch

import dynascope

mode, out = sys.argv[1], sys.argv[2]
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
compiled = torch.compile(model, backend=dynascope.backend(name="workload"))
session = dynascope.session(os.path.join(out, "run.pfw.gz"))


def steps(n):
    for i in range(n):
        with dynascope.region("step", step=i):
            compiled(torch.randn(8, 16)).sum().backward()


steps(3)
if mode == "finalize":
    session.finalize()
elif mode == "finalize-twice":
    session.finalize()
    session.finalize()
elif mode == "exit":
    pass  # interpreter exit closes the file
elif mode == "raise":
    with dynascope.region("step", step=99):
        raise RuntimeError("the user's bug")
elif mode in ("wait", "wait-in-step"):  # the test signals us once "ready" is printed
    print("ready", flush=True)
    if mode == "wait-in-step":
        with dynascope.region("step", step=100):
            while True:
                compiled(torch.randn(8, 16))
    while True:
        steps(1)
        time.sleep(0.01)
elif mode == "threads":
    workers = [threading.Thread(target=steps, args=(4,), name=f"worker-{i}") for i in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    session.finalize()
elif mode == "many-calls":
    with torch.no_grad():
        for _ in range(3000):
            compiled(torch.randn(8, 16))
    session.finalize()
