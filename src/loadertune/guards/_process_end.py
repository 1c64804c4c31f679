"""How the ``loadertune`` command ends: its exit status, without Python's own teardown.

When a run or a sweep returns, every record is written and closed; what is left is the
interpreter tearing its modules down, about 2.5 s on a 2-core machine for torch,
``torch._dynamo`` and MLflow alone (a process that imports them and returns), paid at the
end of every command. The command skips that part only: it joins the threads still running,
runs the ``atexit`` handlers (logging's flush, multiprocessing's joins of its children,
MLflow's) and flushes its streams, as Python's own exit would, then ends at once with the
status ``sys.exit`` would have given.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def end(code: object = None) -> NoReturn:
    """End the process as ``sys.exit(code)`` would, without tearing the modules down."""
    status = exit_status(code)
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # the handlers Python's exit runs, in their order
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def exit_status(code: object) -> int:
    """``sys.exit``'s rule: None is 0, an int is itself, anything else is printed to stderr
    and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
