"""benchmarks/heap_counter.c, the LD_PRELOAD counter compare_fsdp.py reads the Python FSDP2 peer's peak
through: built with cc the way the script builds it, it must count a known allocation on the main
thread and on another thread, give it back when freed, and keep the peak until reset."""
import os
import subprocess
import sys

import pytest

from build_paths import ROOT  # noqa: E402
sys.path.insert(0, ROOT)
from benchmarks.interleave import build_heap_counter  # noqa: E402

# Run under the counter: 64 MiB through malloc on the main thread, then 32 MiB on a second thread,
# each freed, the live and peak bytes printed after each move.
PROBE = r"""
import ctypes, threading
lib = ctypes.CDLL(None)
lib.heap_counter_live.restype = lib.heap_counter_peak.restype = ctypes.c_int64
libc = ctypes.CDLL(None)  # the global namespace: the interposed malloc, as every library calls it
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
MiB = 1 << 20
def show(tag):
    print(tag, lib.heap_counter_live(), lib.heap_counter_peak(), flush=True)
show("start")
p = libc.malloc(64 * MiB)
ctypes.memset(p, 1, 64 * MiB)
show("main-malloc")
libc.free(p)
show("main-free")
lib.heap_counter_reset_peak()
show("reset")
def other():
    q = libc.malloc(32 * MiB)
    show("thread-malloc")
    libc.free(q)
t = threading.Thread(target=other)
t.start()
t.join()
show("thread-free")
"""


@pytest.fixture(scope="module")
def counter(tmp_path_factory):
    library = build_heap_counter(str(tmp_path_factory.mktemp("heap")))
    if library is None:
        pytest.skip("no C compiler (cc) to build benchmarks/heap_counter.c")
    return library


def test_it_counts_allocations_on_every_thread_and_their_peak(counter):
    out = subprocess.run([sys.executable, "-c", PROBE], env=dict(os.environ, LD_PRELOAD=counter),
                         check=True, capture_output=True, text=True).stdout
    seen = {line.split()[0]: (int(line.split()[1]), int(line.split()[2])) for line in out.splitlines()}
    mib = 1 << 20
    start_live = seen["start"][0]
    assert seen["main-malloc"][0] - start_live >= 64 * mib
    assert seen["main-malloc"][1] >= seen["main-malloc"][0]
    # Freed: back to within a small allowance of where it was (the interpreter's own bits).
    assert abs(seen["main-free"][0] - start_live) < mib
    assert seen["main-free"][1] - start_live >= 64 * mib, "the peak outlives the free"
    assert seen["reset"][1] == seen["reset"][0], "a reset peak starts from what is live"
    # A second thread's allocation is counted too (what torch.profiler's events missed).
    assert seen["thread-malloc"][0] - seen["reset"][0] >= 32 * mib
    assert seen["thread-free"][1] - seen["reset"][0] >= 32 * mib
    assert abs(seen["thread-free"][0] - seen["reset"][0]) < mib
