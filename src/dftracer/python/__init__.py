"""Drop-in for pydftracer's Python API (`from dftracer.python import dftracer, dynamo`), on dynascope.

As in pydftracer, nothing is traced unless DFTRACER_ENABLE=1 (or DYNASCOPE_ENABLE=1) is set; then
`dftracer.initialize_log(...)` opens a dynascope trace session and the Dynamo backends trace every
graph op into it. The files are `<logfile>-<pid>.pfw.gz` (or `.pfw` with DFTRACER_TRACE_COMPRESSION=0).
"""

from dftracer.python import dynamo
from dftracer.python.dynamo import Dynamo, create_backend, dftracer_dynamo_backend
from dftracer.python.logger import dft_fn, dftracer

__all__ = ["Dynamo", "create_backend", "dft_fn", "dftracer", "dftracer_dynamo_backend", "dynamo"]
