"""Run benchmark scripts one after another in this one process, so in one JVM:
``python -m benchmarks.one_jvm MODULE [ARGS...] [-- MODULE [ARGS...]]...``.

Each script's ``main()`` runs with its own arguments, then this process's SparkSession is stopped, so
the next script starts its own SparkContext (its own catalog) in the same JVM. Workers that a script
would start in fresh JVMs run in this process too (``ICETIDE_BENCH_ONE_JVM``, see
:func:`benchmarks.common.one_jvm`). For the test suite's tiny runs: one JVM start instead of one per
script. The figures of such a run mean nothing (a warm JVM flatters whatever runs later).
"""

from __future__ import annotations

import importlib
import os
import sys

from benchmarks.common import ONE_JVM_ENV, stop_active_session


def runs(argv: list[str]) -> list[list[str]]:
    """``a x -- b y`` → ``[[a, x], [b, y]]``."""
    out: list[list[str]] = [[]]
    for arg in argv:
        if arg == "--":
            out.append([])
        else:
            out[-1].append(arg)
    return [r for r in out if r]


def main(argv: list[str]) -> None:
    os.environ[ONE_JVM_ENV] = "1"
    for module, *args in runs(argv):
        print(f"== {module} {' '.join(args)}", flush=True)
        sys.argv = [module, *args]
        importlib.import_module(module).main()
        stop_active_session()


if __name__ == "__main__":
    main(sys.argv[1:])
