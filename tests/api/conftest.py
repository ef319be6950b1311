"""Shared fixtures of the API tests: a real llm-worker-rbee process on loopback with the default model.

The worker binary and model come from RBEE_WORKER_BIN and RBEE_MODEL (ctest sets both); when either is missing
every test is skipped with a message saying what to build or install.
"""
import os
from pathlib import Path

import pytest

from worker_process import TOKEN, WorkerProcess, sse_events, wait  # noqa: F401 (tests import them from here)

ROOT = Path(__file__).resolve().parents[2]
WORKER_BIN = os.environ.get("RBEE_WORKER_BIN", str(ROOT / "build" / "ci" / "llm-worker-rbee"))
MODEL = os.environ.get("RBEE_MODEL", str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
# How many times slower the worker build is than the optimized one (ctest sets 3 for the sanitizer build, whose
# workers are Debug -O1 with ASan). Only latency bounds scale with it; what is checked stays the same.
BUILD_SLOWDOWN = float(os.environ.get("RBEE_API_TIME_FACTOR", "1"))


def require_worker():
    if not Path(WORKER_BIN).exists():
        pytest.skip(f"worker binary {WORKER_BIN} is missing: build the llm-worker-rbee target")
    if not Path(MODEL).exists():
        pytest.skip(f"model {MODEL} is missing: run scripts/setup.sh")


class Worker(WorkerProcess):
    """The LLM worker (RBEE_WORKER_BIN) with the default model (RBEE_MODEL) or the one named."""

    def __init__(self, *extra, binary=None, model=None, **kw):
        require_worker()
        super().__init__(binary or WORKER_BIN, model or MODEL, *extra, **kw)


def openai_client(w, timeout=120):
    """An openai client of worker `w`, without retries (a failure shows at once)."""
    import openai  # imported here: only the OpenAI-client tests need the package

    return openai.OpenAI(base_url=w.url + "/v1", api_key=TOKEN, max_retries=0, timeout=timeout)


@pytest.fixture(scope="session")
def worker():
    """The shared worker: auth on, 16 slots (the concurrency test needs them)."""
    w = Worker("--parallel", "16", "--ctx-size", "8192")
    yield w
    code = w.stop()
    assert code == 0, "worker did not exit cleanly:\n" + "\n".join(w.lines[-30:])


@pytest.fixture(scope="module")
def client(worker):
    """An openai client of the shared worker."""
    return openai_client(worker)


@pytest.fixture(scope="module")
def model_id(client):
    """The shared worker's one model."""
    return client.models.list().data[0].id
