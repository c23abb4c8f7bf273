"""The only package that touches torch's private APIs: one module per side of dynascope that needs them
(version, compile, dynamo, training, distributed, memory), every name re-exported here so that callers say
`_torch.name`.

Each accessor names the private piece it reads and the torch versions it was checked on. When a piece
moved, the accessor raises TorchVersionError naming it and the installed torch version, so callers
can report that one line and carry on with the rest of their work.

Public torch APIs (torch.compile, torch.fx.GraphModule, ...) are used directly elsewhere; anything
with a leading underscore, or documented as internal, goes through here.
"""

from __future__ import annotations

from dynascope._torch.compile import (  # noqa: F401
    _AOT_HITS,
    _aot_loadable_key,
    _aot_output_code,
    _boxed_codegen_type,
    _handle,
    _install_aot_hit_hook,
    _wrapper_call_of,
    add_structured_trace_handler,
    aot_autograd,
    aot_cache_enabled,
    aot_cache_hits_unsupported,
    boxed_codegen,
    compiling_graph_name,
    current_compile_id,
    fx_graph_cache_place,
    graph_name,
    inductor_cache_dir,
    inductor_compilers,
    inductor_cpp_wrapper,
    inductor_cudagraphs,
    inductor_mode_options,
    inductor_provenance_patch,
    kernel_provenance,
    lookup_backend,
    min_cut_partitioner,
    on_aot_cache_hits,
    outer_callable,
    record_compile_id,
    without_autograd_cache,
    wrapper_call,
)
from dynascope._torch.distributed import (  # noqa: F401
    ddp_comm_hook_registration,
    ddp_reducer_in_use,
    ddp_register_comm_hook,
    ddp_split,
    dynamo_treats_like,
    launcher_parser,
    sequence_reader,
    skip_frames_recursively,
)
from dynascope._torch.dynamo import (  # noqa: F401
    _OLD_BREAK_NAMES,
    _PREFIX,
    _REFUSALS,
    _RETURNS,
    _explain_import,
    _frame_name,
    _guard_manager,
    _no_frame_callback,
    add_probes,
    break_reason_name,
    cache_entries,
    check_entry_guards,
    check_guard_user_lines,
    check_recompile_reasons_kept,
    compilation_metrics,
    compiler_bisector,
    dynamo_reset,
    entry_backend_name,
    entry_compile_id,
    entry_frame_code,
    force_eager,
    fx_code,
    graph_break_count,
    graph_breaks_since,
    graph_module_of,
    guard_code_parts,
    guard_fail_reason,
    guard_tree,
    has_dynamo_profiler,
    hook_dynamo_tracing,
    inductor_config_patch,
    is_optimized_module,
    logs_graph_breaks,
    metrics_record_recompile_reasons,
    recompile_limit,
    recompile_refusal,
    refused_recompile,
    register_bytecode_hook,
    register_replacing_bytecode_hook,
    skip_frames_of,
    torch_package_dir,
    unwrap_compiled,
)
from dynascope._torch.memory import is_view_op, on_inductor_peak, on_partition, size_hint  # noqa: F401
from dynascope._torch.training import (  # noqa: F401
    _OWN_PROFILER,
    Activity,
    activities,
    dataloader_batch_index,
    dataloader_fetcher_classes,
    dataloader_iterator_classes,
    dataloader_workers,
    start_activity,
    stop_activity,
    watch_other_profilers,
    worker_task_index,
)
from dynascope._torch.version import (  # noqa: F401
    CHECKED_ON,
    MIN_TORCH,
    _parse_version,
    moved,
    require_torch,
    torch_at_least,
    torch_version,
    unsupported,
)
