"""Memory on the torch side: the GPU's on the trace's memory track, and what eager autograd saves for the
backward (EagerSaved, for `dynascope run --compare-eager`).

The GPU's: the CUDA caching allocator's counters (allocated and reserved bytes of the current device), read
by the memory sampler once per batch (trace/memory.py) once CUDA is in use. Public torch APIs
(torch.cuda.memory_allocated / memory_reserved); nothing is reset, so a program's own
torch.cuda.max_memory_allocated() is left as it is."""

from __future__ import annotations

from dynascope.trace import buffers, memory

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


# -- what eager autograd saves for the backward (dynascope run --compare-eager) ----------------------------


class EagerSaved:
    """While installed, every tensor eager autograd saves for the backward is counted once per storage, charged
    to the layer that made it (the innermost module whose output it is, else the module running when it was
    saved), parameters and the program's inputs left out (they are held anyway), as the compiled side's
    account does (capture/graph_memory.py). Per layer, the most saved in one forward of the outermost module is
    written to the trace at the end: one event per layer, "cat":"memory", name "saved for backward".

    Public torch APIs: torch.autograd.graph.saved_tensors_hooks, global module forward hooks."""

    def __init__(self) -> None:
        self._stack: list[object] = []
        self._names: dict[int, dict[int, str]] = {}  # root module id -> {module id: path}
        self._made_by: dict[int, str] = {}  # storage data_ptr -> layer whose output it is (this forward)
        self._pass: dict[str, dict[int, int]] = {}  # layer -> {storage data_ptr: bytes} saved in this forward
        self.most: dict[str, int] = {}  # layer -> the most saved in one forward
        self._undo: list[object] = []

    def __enter__(self) -> EagerSaved:
        import torch
        from torch.nn.modules import module

        self._undo.append(module.register_module_forward_pre_hook(self._pre))
        self._undo.append(module.register_module_forward_hook(self._post))
        hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda packed: packed)
        hooks.__enter__()
        self._undo.append(hooks)
        return self

    def __exit__(self, *exc: object) -> None:
        for undo in reversed(self._undo):
            if hasattr(undo, "remove"):
                undo.remove()
            else:
                undo.__exit__(None, None, None)  # type: ignore[attr-defined]
        self._undo.clear()
        self._end_pass()
        now = buffers.now_ns()
        for layer, nbytes in sorted(self.most.items()):
            args = {"layer": layer, "saved_bytes": nbytes}
            buffers.emit(("P", "saved for backward", memory.MEMORY_CAT, now, now, args))

    def _pre(self, mod: object, args: object) -> None:
        if not self._stack:
            self._end_pass()
            if id(mod) not in self._names:
                self._names[id(mod)] = {id(m): _path(name) for name, m in mod.named_modules()}  # type: ignore[attr-defined]
        self._stack.append(mod)

    def _post(self, mod: object, args: object, output: object) -> None:
        if self._stack and self._stack[-1] is mod:
            self._stack.pop()
        layer = self._layer(mod)
        for tensor in _tensors(output):
            self._made_by.setdefault(_storage(tensor)[0], layer)

    def _layer(self, mod: object | None) -> str:
        root = self._stack[0] if self._stack else mod
        return self._names.get(id(root), {}).get(id(mod), "") if mod is not None else ""

    def _pack(self, tensor: object) -> object:
        try:
            owner = getattr(tensor, "_base", None)
            owner = tensor if owner is None else owner
            if getattr(owner, "grad_fn", None) is not None:  # parameters and inputs are leaves: held anyway
                ptr, nbytes = _storage(tensor)
                layer = self._made_by.get(ptr) or self._layer(self._stack[-1] if self._stack else None)
                self._pass.setdefault(layer, {})[ptr] = nbytes
        except Exception:  # noqa: BLE001 - never break the program's backward
            pass
        return tensor

    def _end_pass(self) -> None:
        for layer, storages in self._pass.items():
            self.most[layer] = max(self.most.get(layer, 0), sum(storages.values()))
        self._pass.clear()
        self._made_by.clear()


def _path(name: str) -> str:
    """A module's path without torch.compile's wrapper level ("_orig_mod.gate" -> "gate"), as Dynamo names it."""
    return ".".join(part for part in name.split(".") if part != "_orig_mod")


def _storage(tensor: object) -> tuple[int, int]:
    storage = tensor.untyped_storage()  # type: ignore[attr-defined]
    return storage.data_ptr(), storage.nbytes()


def _tensors(value: object) -> list[object]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []
