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
# Measurements at most (see the test).
ATTEMPTS = 2


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


def measure_both():
    """Best-of-3 seconds of the request with default threads and with -t 1, one worker each."""
    times = {}
    for label, extra in (("default", ()), ("one", ("-t", "1"))):
        w = Worker("--parallel", "1", *extra)
        try:
            times[label] = timed_request(w)
        finally:
            assert w.stop() == 0
    return times


def test_default_threads_no_slower_than_one_with_a_cpu_hog(capsys):
    cpus = len(os.sched_getaffinity(0))
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cpus)]
    # ATTEMPTS measurements at most, the first within the bound passes. What the bound is for (the pool waiting on
    # every op for threads the hogs keep off the cores) made the default threads 10-70x slower in every run; where
    # the kernel puts the worker's threads beside the hogs makes them 1.3-1.7x slower in about one run in five on
    # this 2-core machine kind (docs/RELIABILITY.md, session 9), which a second measurement tells apart.
    attempts = []
    try:
        for _ in range(ATTEMPTS):
            attempts.append(measure_both())
            if attempts[-1]["default"] <= BOUND * attempts[-1]["one"]:
                break
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    # Printed past pytest's capture, so that the figures reach ctest's log (Testing/Temporary/LastTest.log) also
    # when the test passes.
    with capsys.disabled():
        for times in attempts:
            print(f"\ncpu hog: {cpus} CPUs, {cpus} hog processes, load {load}: default threads "
                  f"{times['default']:.2f} s, -t 1 {times['one']:.2f} s (ratio {times['default'] / times['one']:.2f}, "
                  f"bound {BOUND})")
    times = attempts[-1]
    assert times["default"] <= BOUND * times["one"], attempts
