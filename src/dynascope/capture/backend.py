"""The tracing torch.compile backend.

    model = torch.compile(model, backend=dynascope.backend(name="resnet", epoch=1))

With autograd=True (the default) the graph goes through AOT autograd exactly as backend
"aot_eager" does, and every ATen op of the forward, backward and inference graphs is traced and
tagged with its phase. With autograd=False the Dynamo graph's own ops are traced, as backend
"eager" runs them. Disabled tracing compiles with the inner backend untouched.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dynascope import _torch
from dynascope.capture import compile_events, device, frames, graph_memory, kernels, untraced, warm_cache
from dynascope.capture.attribution import attribution, ddp_split_fields, event_name, graph_label, layers_by_seq_nr
from dynascope.capture.instrument import instrument, traced_nodes, uses_cuda
from dynascope.errors import ConfigError, TorchVersionError
from dynascope.trace import buffers, fileio
from dynascope.trace.config import env_flag, tracing_enabled
from dynascope.trace.format import GRAPH_CAT
from dynascope.trace.ops import TABLE, OpSpec
from dynascope.trace.session import current_session, ensure_session

INNER_BACKENDS = ("aot_eager", "eager", "inductor")
TORCH_COMPILE_OPTIONS = ("fullgraph", "dynamic", "mode", "options", "disable")  # dynascope.compile passes these on


def _check(name: str, value: Any, types: tuple, what: str) -> None:
    if value is not None and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
        raise ConfigError(f"backend parameter {name}={value!r} must be {what}")


@dataclass
class CompileContext:
    """What one Dynamo graph's compilation shares between its forward, backward and inference graphs."""

    graph: str  # as the trace names it: Dynamo's name, and for a piece of DDPOptimizer's split "[ddp 2/4]"
    compile_id: str
    grad_enabled: bool
    layer_by_seq: dict[int, tuple[str, str]] = field(default_factory=dict)
    base: str = ""  # Dynamo's name of the graph ("__compiled_fn_1"), which its frame's bytecode calls
    ddp: dict[str, Any] = field(default_factory=dict)  # the graph record's DDP split fields (ddp_split_fields)


class TracingBackend:
    """A torch.compile backend that traces every graph op into the active trace session.

    `dynascope.backend(...)` is this class. name/epoch/step/image_idx/image_size are recorded on
    every op event. enable=None follows DYNASCOPE_ENABLE / DFTRACER_ENABLE (on when unset).
    autograd=True traces the AOT forward, backward and inference graphs' ATen ops (as backend
    "aot_eager" runs them); autograd=False the Dynamo graph's ops (as backend "eager").
    inner="inductor" times every kernel call of inductor's generated code (forward, backward and
    inference), each tagged with the ops, layers and source lines it covers. record_shapes adds
    compile-time input shapes and dtypes (default: DFTRACER_INC_METADATA). cuda_sync (default:
    DYNASCOPE_CUDA_SYNC) synchronises the device before each reading in graphs whose inputs are on
    CUDA, so that op times are execution times, not launch times (at the cost of serialising the
    GPU); CPU graphs are untouched.
    """

    def __init__(
        self,
        name: str | None = None,
        epoch: int | None = None,
        step: int | None = None,
        image_idx: int | None = None,
        image_size: Any = None,
        enable: bool | None = None,
        autograd: bool = True,
        inner: str | None = None,
        record_shapes: bool | None = None,
        cuda_sync: bool | None = None,
    ) -> None:
        _check("name", name, (str,), "a string")
        _check("epoch", epoch, (int,), "a whole number")
        _check("step", step, (int,), "a whole number")
        _check("image_idx", image_idx, (int,), "a whole number")
        _check("image_size", image_size, (int, tuple, list), "a number or a tuple such as (224, 224)")
        _check("enable", enable, (bool,), "True or False")
        _check("autograd", autograd, (bool,), "True or False")
        _check("record_shapes", record_shapes, (bool,), "True or False")
        _check("cuda_sync", cuda_sync, (bool,), "True or False")
        inner = inner or ("aot_eager" if autograd else "eager")
        if inner not in INNER_BACKENDS:
            raise ConfigError(f"inner backend {inner!r} is not one of {', '.join(INNER_BACKENDS)}")
        if inner == "aot_eager" and not autograd:
            raise ConfigError(
                "inner='aot_eager' needs autograd=True (autograd=False traces the Dynamo graph, as 'eager')"
            )
        if inner == "eager" and autograd:
            raise ConfigError("inner='eager' runs the Dynamo graph without AOT autograd: pass autograd=False with it")
        _torch.require_torch()
        self.labels = {
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in (
                ("tracer", name),
                ("epoch", epoch),
                ("step", step),
                ("image_idx", image_idx),
                ("image_size", image_size),
            )
            if v is not None
        }
        self.enabled = tracing_enabled(True) if enable is None else enable
        self.autograd = autograd
        self.inner = inner
        self.record_shapes = record_shapes
        self.cuda_sync = env_flag("CUDA_SYNC", False) if cuda_sync is None else cuda_sync
        self.__name__ = f"dynascope_{inner}"  # Dynamo names backends by __name__ in logs
        if self.enabled:
            compile_events.install()
        if inner == "inductor":
            try:  # imported here, as torch.compile(backend="inductor") does, not in the first step's compile
                _torch.inductor_compilers()
            except TorchVersionError:
                pass  # the first compile says so, and runs untraced

    def __repr__(self) -> str:
        state = "tracing" if self.enabled else "disabled"
        return f"<dynascope backend inner={self.inner} autograd={self.autograd} {state} {self.labels}>"

    # -- torch.compile entry point --------------------------------------------------------------

    def __call__(self, gm: Any, example_inputs: list, mode: str | None = None, options: dict | None = None) -> Callable:
        """torch.compile calls this with the graph, and with its own `mode`/`options` where it was given them."""
        kwargs = self._inner_options(mode, options)
        if not self.enabled:
            return self._untraced(gm, example_inputs, **kwargs)
        session = current_session() or ensure_session()
        from dynascope.capture import training

        if session.config.step_events and not training.installed():
            training.install(io=not session.config.disable_io)  # a session opened before torch was imported
        if session.config.frame_events and not frames.installed():
            frames.install()
        if session.config.device_time and not device.installed() and uses_cuda(gm):
            device.install(session)  # a session opened before torch was imported
        record_shapes = session.config.record_shapes if self.record_shapes is None else self.record_shapes
        import torch

        base = graph_label(gm)
        context = CompileContext(base, "?", torch.is_grad_enabled(), base=base)
        self._ddp_split(context, gm)
        try:
            compile_fn = self._traced_compiler(gm, context, record_shapes)
        except Exception as exc:  # noqa: BLE001 - tracing must never cost the user their program
            _report_untraced(context, "graph", exc, self.inner)
            return self._fall_back(gm, example_inputs, **kwargs)
        compiled = compile_fn(gm, example_inputs, **kwargs)  # errors in the user's graph are torch's to report
        frames.graph_traced(context.base)
        return compiled

    @staticmethod
    def _ddp_split(context: CompileContext, gm: Any) -> None:
        """A graph DDPOptimizer split at DDP's buckets is compiled one piece at a time: each piece gets its
        own name ("__compiled_fn_1[ddp 2/4]") and its bucket's fields on its graph record."""
        try:
            split = _torch.ddp_split()
        except TorchVersionError as exc:
            _note_once(f"{exc} (the graphs DDP splits at its buckets are not told apart)")
            return
        if split is None or split.get("index") is None:
            return
        context.ddp = ddp_split_fields(split, gm)
        context.graph = f"{context.base}[ddp {context.ddp['ddp_split']}/{context.ddp['ddp_splits']}]"

    def _inner_options(self, mode: str | None, options: dict | None) -> dict[str, Any]:
        """What the inner backend gets of torch.compile's mode and options: inductor takes them as config
        patches, as torch.compile hands them to inductor; eager and aot_eager run no inductor, so there
        they do not apply (said once on stderr)."""
        patches = dict(_torch.inductor_mode_options(mode)) if mode not in (None, "default") else {}
        patches.update(options or {})
        if not patches:
            return {}
        if self.inner == "inductor":
            return {"config_patches": patches}
        _note_once(f"torch.compile mode={mode!r} options={options!r} tune inductor; the {self.inner} backend "
                           "dynascope traces with runs no inductor, so they do not apply (inner='inductor' keeps them)")
        return {}

    def _traced_compiler(self, gm: Any, context: CompileContext, record_shapes: bool) -> Callable:
        """The compiler for this graph. What needs a torch internal fails here, before anything compiles."""
        context.compile_id = str(gm.meta.get("dynamo_compile_id") or _torch.current_compile_id() or "?")
        if self.inner == "inductor":
            return self._kernel_level(context)
        if not self.autograd:
            self._trace_graph(gm, context, "inference", record_shapes)
            return lambda gm, *_, **__: gm.forward
        return _torch.aot_autograd(
            fw_compiler=self._aot_compiler(context, "forward", record_shapes),
            bw_compiler=self._aot_compiler(context, "backward", record_shapes),
            inference_compiler=self._aot_compiler(context, "inference", record_shapes),
            partition_fn=_torch.min_cut_partitioner(),
            keep_inference_input_mutations=True,
        )

    def _untraced(self, gm: Any, example_inputs: list, **kwargs: Any) -> Callable:
        if self.inner == "eager":
            return gm.forward
        return _torch.lookup_backend(self.inner)(gm, example_inputs, **kwargs)

    def _fall_back(self, gm: Any, example_inputs: list, **kwargs: Any) -> Callable:
        try:
            return self._untraced(gm, example_inputs, **kwargs)
        except TorchVersionError as exc:  # the inner backend's lookup moved too: run it as eager does
            untraced.report(graph_label(gm), "?", "graph", exc, "eager")
            return gm.forward

    def _aot_compiler(self, context: CompileContext, phase: str, record_shapes: bool) -> Callable:
        def compile_graph(fx_graph: Any, example_inputs: list) -> Callable:
            try:
                return self._traced_boxed(fx_graph, context, phase, record_shapes)
            except Exception as exc:  # noqa: BLE001 - this graph runs untraced, as aot_eager would run it
                _report_untraced(context, phase, exc, self.inner)
                return untraced.boxed_interpreter(fx_graph)

        return compile_graph

    def _traced_boxed(self, fx_graph: Any, context: CompileContext, phase: str, record_shapes: bool) -> Callable:
        # The boxed convention (one list argument, cleared early) is what "aot_eager" uses; a plain
        # gm.forward here would cost tens of microseconds per call in AOT's wrappers.
        fx_graph.graph.set_codegen(_torch.boxed_codegen())
        if phase == "forward":
            context.layer_by_seq.update(layers_by_seq_nr(fx_graph))
        self._trace_graph(fx_graph, context, phase, record_shapes)
        forward = fx_graph.forward

        def run(args: list) -> Any:
            return forward(args)

        run._boxed_call = True  # type: ignore[attr-defined]
        return run

    def _trace_graph(self, gm: Any, context: CompileContext, phase: str, record_shapes: bool) -> int:
        shared = {"compile_id": context.compile_id, "graph": context.graph, "phase": phase, "backend": self.inner}
        grad = context.grad_enabled and phase != "backward"
        nodes = traced_nodes(gm)
        ops = [
            OpSpec.make(
                event_name(node, gm),
                "dynamo",
                grad,
                {**shared, **attribution(node, gm, context.layer_by_seq, record_shapes), **self.labels},
            )
            for node in nodes
        ]
        graph = OpSpec.make(
            f"{context.graph}.{phase}",
            GRAPH_CAT,
            grad,
            {"kind": "graph", **shared, "n_ops": len(ops), **context.ddp, **self.labels},
        )
        gid = TABLE.register_graph(graph, ops)
        instrument(gm, gid, self._synchronize(gm), _sink(gm))
        return gid

    def _synchronize(self, gm: Any) -> Any:
        if not (self.cuda_sync and uses_cuda(gm)):
            return None
        import torch

        return torch.cuda.synchronize

    def _kernel_level(self, context: CompileContext) -> Callable:
        """Inductor, with every kernel call of its forward, backward and inference wrappers timed.

        Inductor's own entry point (compile_fx) runs with a per-graph compiler that compiles each graph
        as inductor does (compile_fx_inner, FX-graph cache included) and then instruments the result
        (capture/kernels.py), writing down each kernel's attribution beside inductor's cache
        (capture/warm_cache.py). AOTAutograd's cache stays on: its hits skip that per-graph compiler,
        so a hit is taken only where every graph it loads has that record, and its graphs are
        instrumented from it (where torch's hit path is not known, its cache is off for traced compiles).
        Provenance tracking is on, so each kernel knows what it covers."""
        compile_fx, compile_fx_inner = _torch.inductor_compilers()
        provenance = _torch.inductor_provenance_patch()
        if not provenance:
            _note_once(str(_torch.unsupported("inductor kernel provenance (the fused ops, layers and source lines "
                                              "of each kernel); kernels are traced by name")))  # fmt: skip
        dynamo: dict[str, Any] = {}  # the Dynamo graph being compiled ("gm") and its digest
        accounts: list[Any] = []  # the memory account of this graph's partition (capture/graph_memory.py)

        def inner_compile(gm: Any, example_inputs: list, **kwargs: Any) -> Any:
            phase = _inductor_phase(kwargs)
            if phase == "forward":
                context.layer_by_seq.update(layers_by_seq_nr(gm))  # before inductor's passes rewrite gm
            compiled = compile_fx_inner(gm, example_inputs, **kwargs)
            try:
                if _torch.inductor_cudagraphs(kwargs):
                    named, kind = self._trace_replays(compiled, gm, context, phase), "replay"
                else:
                    _check_kernels_timeable(kwargs)
                    named, kind = self._trace_kernels(compiled, gm, context, phase), "kernels"
            except Exception as exc:  # noqa: BLE001 - this graph runs as inductor compiled it, untimed
                _report_untraced(context, phase, exc, "inductor")
                return compiled
            place = _torch.fx_graph_cache_place(compiled)
            if place is not None and "digest" in dynamo:
                # the backward's record carries the account again: inductor's estimate of the backward's peak
                # arrives only now (its compile may come at its first call, after the forward's record)
                account = accounts[-1].to_dict() if accounts else None
                warm_cache.save(place[1], phase, dynamo["digest"], kind, named, memory=account)
            return compiled

        def loaded(phase: str, compiled: Any) -> None:
            """A graph from AOTAutograd's cache: instrumented from its record (checked before it loaded)."""
            try:
                record = warm_cache.load(_torch.fx_graph_cache_place(compiled)[1], phase, dynamo["digest"])  # type: ignore[index]
                if record is None:
                    raise ConfigError("its kernels' record beside inductor's cache went missing while it loaded")
                if phase == "forward" and isinstance(record.get("memory"), dict):
                    graph_memory.restore(record["memory"], context.compile_id, context.base)
                elif phase == "backward" and isinstance(record.get("memory"), dict):
                    graph_memory.restore_backward_estimate(record["memory"], context.compile_id, context.base)
                saved = list(zip(record["names"], record["fields"], strict=True))
                if record["kind"] == "replay":
                    self._trace_replays(compiled, dynamo["gm"], context, phase, saved)
                else:
                    self._trace_kernels(compiled, dynamo["gm"], context, phase, saved)
            except Exception as exc:  # noqa: BLE001 - this graph runs as inductor compiled it, untimed
                _report_untraced(context, phase, exc, "inductor")

        def compile_graph(gm: Any, example_inputs: list, config_patches: dict | None = None) -> Callable:
            patches = {**(config_patches or {}), **provenance}
            hits = _aot_cache_context(lambda keys: warm_cache.have(keys, dynamo["digest"]), loaded)
            if hits is not None:
                dynamo.update(gm=gm, digest=warm_cache.graph_digest(gm))
            stop = _listen_for_memory(accounts.append)  # kept with the forward's record beside the cache
            try:
                with hits or _torch.without_autograd_cache():
                    return compile_fx(gm, example_inputs, inner_compile=inner_compile, config_patches=patches or None)
            finally:
                stop()
                dynamo.pop("gm", None)  # hits load only inside compile_fx; a lazy backward needs the digest alone

        return compile_graph

    def _trace_kernels(self, compiled: Any, gm: Any, context: CompileContext, phase: str,
                       saved: list[tuple[str, dict]] | None = None) -> list[tuple[str, dict]]:  # fmt: skip
        """Register the kernels of one compiled graph and put an instrumented `call` in its place; each
        kernel's (name, attribution fields), worked out from `gm`, or `saved` from a cold compile."""
        import types

        call, replace = _torch.wrapper_call(compiled)
        function = getattr(call, "__func__", call)
        filename = function.__code__.co_filename
        # the code inductor loaded, from its cache directory; our own read, not the program's I/O
        with fileio.real_open(filename, encoding="utf-8") as source:
            wrapper = kernels.Wrapper.parse(source.read())
        if saved is None:
            provenance = kernels.with_saved_nodes(_torch.kernel_provenance(compiled),
                                                  _torch.fx_graph_cache_place(compiled))  # fmt: skip
            named = self._kernel_fields(wrapper, provenance, gm, context)
        elif [name for name, _ in saved] == [call.name for call in wrapper.calls]:
            named = saved
        else:
            raise ConfigError("the kernels inductor loaded are not those its record beside the cache names")
        ops = [(name, {**own, "kernel_code": TABLE.add_source(code)})
               for (name, own), code in zip(named, wrapper.codes, strict=True)]  # fmt: skip
        gid = self._register_inductor_graph(context, phase, ops)
        new = kernels.instrumented_call(wrapper, filename, function.__globals__, gid, _sink(gm), buffers.now_ns,
                                        self._synchronize(gm))  # fmt: skip
        replace(types.MethodType(new, call.__self__) if hasattr(call, "__self__") else new)
        return named

    def _trace_replays(self, compiled: Any, gm: Any, context: CompileContext, phase: str,
                       saved: list[tuple[str, dict]] | None = None) -> list[tuple[str, dict]]:  # fmt: skip
        """A graph inductor runs as CUDA graphs (mode="reduce-overhead") replays its kernels with no Python
        between them: one event per call of the graph, whose kernels the device join attributes to it."""
        run, replace = _torch.outer_callable(compiled)
        named = saved or [(kernels.REPLAY, kernels.replay_attribution(gm, context.layer_by_seq))]
        gid = self._register_inductor_graph(context, phase, named)
        replace(kernels.timed_replay(run, gid, _sink(gm), buffers.now_ns))
        return named

    def _kernel_fields(self, wrapper: Any, provenance: dict, gm: Any,
                       context: CompileContext) -> list[tuple[str, dict]]:  # fmt: skip
        """(name, attribution fields) of each kernel call of one compiled graph, with what each covers."""
        calls = wrapper.calls
        covered = kernels.match_provenance(calls, provenance)
        fields = [
            kernels.kernel_attribution(kernel, names, stacks, gm, context.layer_by_seq)
            for kernel, (names, stacks) in zip(calls, covered, strict=True)
        ]
        kernels.borrow_layers(fields, wrapper.consumers)
        return [(kernel.name, own) for kernel, own in zip(calls, fields, strict=True)]

    def _register_inductor_graph(self, context: CompileContext, phase: str, ops: list[tuple[str, dict]]) -> int:
        """The graph id of one inductor graph whose op events are `ops` (name, attribution fields)."""
        shared = {"compile_id": context.compile_id, "graph": context.graph, "phase": phase, "backend": "inductor"}
        grad = context.grad_enabled and phase != "backward"
        specs = [OpSpec.make(name, "dynamo", grad, {**shared, **own, **self.labels}) for name, own in ops]
        graph_fields = {"kind": "graph", **shared, "n_ops": len(specs), **context.ddp, **self.labels}
        return TABLE.register_graph(OpSpec.make(f"{context.graph}.{phase}", GRAPH_CAT, grad, graph_fields), specs)


_noted: set[str] = set()


def _report_untraced(context: CompileContext, phase: str, exc: BaseException, runs_with: str) -> None:
    """untraced.report for one of this compile's graphs; a DDP piece's frame is Dynamo's graph's."""
    untraced.report(context.graph, context.compile_id, phase, exc, runs_with)
    if context.base != context.graph and phase != "backward":
        frames.graph_untraced(context.base)


def _note_once(text: str) -> None:
    if text not in _noted:
        _noted.add(text)
        print(f"dynascope: note: {text}", file=sys.stderr)


def _aot_cache_context(check: Callable, loaded: Callable) -> Any:
    """The context that lets AOTAutograd's cache serve a traced inductor compile (see _kernel_level), or
    None where this torch's hit path is not known: traced compiles then run with that cache off, and
    stderr says so once (where the cache was on)."""
    reason = _torch.aot_cache_hits_unsupported()
    if reason is None:
        return _torch.on_aot_cache_hits(check, loaded)
    if _torch.aot_cache_enabled():
        _note_once(f"AOTAutograd's cache is off for traced inductor compiles on {reason}: "
                   "warm runs compile each graph's AOT part again")  # fmt: skip
    return None


def _listen_for_memory(listener: Callable) -> Callable[[], None]:
    """graph_memory.listen, or a no-op where this torch's partitioner cannot be watched (the observer says so)."""
    try:
        return graph_memory.listen(listener)
    except TorchVersionError:
        return lambda: None


def _check_kernels_timeable(kwargs: dict) -> None:
    """Raise the one-line reason when inductor's kernels for this graph do not run from Python code."""
    if _torch.inductor_cpp_wrapper(kwargs):
        raise ConfigError("inductor's C++ wrapper (cpp_wrapper=True) calls its kernels from C++, "
                          "so they cannot be timed one by one")  # fmt: skip


def _sink(gm: Any) -> Callable:
    """What a graph's generated code calls for its buffer: device.sink for graphs on CUDA while device
    activity is collected (it also hands the activity over now and then), else buffers.sink."""
    return device.sink if device.installed() and uses_cuda(gm) else buffers.sink


def _inductor_phase(kwargs: dict) -> str:
    """Which graph inductor's per-graph compiler was handed, from its is_backward / is_inference flags."""
    if kwargs.get("is_backward"):
        return "backward"
    return "inference" if kwargs.get("is_inference") else "forward"



backend = TracingBackend  # dynascope.backend(...): the public name of the tracing backend


def compile(fn: Callable | None = None, /, **options: Any) -> Any:
    """`@dynascope.compile` or `@dynascope.compile(epoch=1, ...)`: torch.compile with a tracing backend.

    Backend options are those of `dynascope.backend`; torch.compile's own (fullgraph, dynamic, mode,
    options, disable) pass through to torch.compile. mode and options tune inductor, so they take effect
    with inner="inductor"; the default aot_eager tracing runs no inductor and says so once.
    """
    compile_options = {k: options.pop(k) for k in TORCH_COMPILE_OPTIONS if k in options}
    if compile_options.get("mode") not in (None, "default"):
        _torch.inductor_mode_options(compile_options["mode"])  # an unknown mode fails here, in one line
    traced = backend(**options)

    def decorate(target: Callable) -> Any:
        import torch

        return torch.compile(target, backend=traced, **compile_options)

    if fn is None:
        return decorate
    if not callable(fn):
        raise ConfigError(f"dynascope.compile expects a function or module, got {type(fn).__name__}")
    return decorate(fn)

