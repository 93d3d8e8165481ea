"""A PyTorch peer's peak bytes in a step, as ddpbench's peak_allocated_bytes counts them: what the
rank held before the step plus the most the step allocated on top. Counted exactly, on every thread,
where the peer runs under benchmarks/heap_counter.c (LD_PRELOAD; build_heap_counter in
interleave.py); otherwise from torch.profiler's memory events, which see one thread and are no exact
peak. Shared by python_fsdp_loop.py and python_pp_loop.py."""
import ctypes


def heap_counter():
    """benchmarks/heap_counter.c's functions when this process runs under it (LD_PRELOAD), or None."""
    lib = ctypes.CDLL(None)
    if not hasattr(lib, "heap_counter_live"):
        return None
    lib.heap_counter_live.restype = lib.heap_counter_peak.restype = ctypes.c_int64
    return lib


def step_peak_bytes(step, held, heap):
    """`held` plus the most `step()` allocated on top of what was live when it began: counted by the
    heap counter when there is one, else the highest running sum of the profiler's memory events."""
    if heap is not None:
        start = heap.heap_counter_live()
        heap.heap_counter_reset_peak()
        step()
        return held + heap.heap_counter_peak() - start
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    # Every allocation (+bytes) and free (-bytes) the CPU allocator reported, in time order.
    deltas = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    live = peak = 0
    for _, delta in deltas:
        live += delta
        peak = max(peak, live)
    return held + peak
