"""A machine kept busy by another process (issue 13): the same request with the default thread count must not be
slower than with one thread. Before the fix the pool waited on every op for every worker thread to show up, and on
a busy machine a 32-token request took 10-70x longer with the default threads than with -t 1."""
import os
import subprocess
import sys
import time

from conftest import Worker

# Default threads may be at most this much slower than one thread (scheduling noise on a shared machine).
BOUND = 1.5


def timed_request(w, repeats=3):
    """Best-of-n seconds of one greedy 32-token completion (the first run also warms up)."""
    best = None
    for _ in range(repeats):
        t0 = time.monotonic()
        r = w.post("/v1/completions", {"prompt": "The history of the honey bee", "max_tokens": 32, "temperature": 0})
        dt = time.monotonic() - t0
        assert r.status_code == 200, r.text
        best = dt if best is None else min(best, dt)
    return best


def test_default_threads_no_slower_than_one_with_a_cpu_hog(capsys):
    cpus = len(os.sched_getaffinity(0))
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cpus)]
    try:
        times = {}
        for label, extra in (("default", ()), ("one", ("-t", "1"))):
            w = Worker("--parallel", "1", *extra)
            try:
                times[label] = timed_request(w)
            finally:
                assert w.stop() == 0
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    # Printed past pytest's capture, so that the figures reach ctest's log (Testing/Temporary/LastTest.log) also
    # when the test passes.
    with capsys.disabled():
        print(f"\ncpu hog: {cpus} CPUs, {cpus} hog processes, load {load}: default threads "
              f"{times['default']:.2f} s, -t 1 {times['one']:.2f} s (ratio {times['default'] / times['one']:.2f}, "
              f"bound {BOUND})")
    assert times["default"] <= BOUND * times["one"], times
