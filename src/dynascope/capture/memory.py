"""The GPU's memory on the trace's memory track: the CUDA caching allocator's counters (allocated and reserved
bytes of the current device), read by the memory sampler once per batch (trace/memory.py) once CUDA is in use.
Public torch APIs (torch.cuda.memory_allocated / memory_reserved); nothing is reset, so a program's own
torch.cuda.max_memory_allocated() is left as it is."""

from __future__ import annotations

from dynascope.trace import memory

TRACK = "cuda memory"


def _read() -> dict[str, int]:
    import torch

    if not torch.cuda.is_initialized():
        return {}  # never initialise CUDA for the program
    return {"cuda_allocated": int(torch.cuda.memory_allocated()), "cuda_reserved": int(torch.cuda.memory_reserved())}


def install() -> None:
    import torch

    if torch.cuda.is_available():
        memory.add_reader(TRACK, _read)


def uninstall() -> None:
    memory.remove_reader(TRACK)
