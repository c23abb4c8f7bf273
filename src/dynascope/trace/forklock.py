"""The lock a fork waits for. The trace package's own threads (the writer, the memory sampler) import numba
and load their compiled loops in the background, just after a session opens. A fork in the middle of that
(a DataLoader starting its workers at once) would copy a half-done import into the child, whose module lock
no thread of the child will ever release: the worker's own writer would wait for it forever, and the worker
would be killed without its trace's end. So those threads import and load under this lock, and a fork waits
for it (once per process: later loads find the modules imported and the machine code cached).

Reentrant: a thread that holds it may load more under it (trace/oplines.py's warm-up)."""

import os
import threading

lock = threading.RLock()
os.register_at_fork(before=lock.acquire, after_in_parent=lock.release, after_in_child=lock.release)
