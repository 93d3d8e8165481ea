"""The PyTorch peers' ranks as processes (python_ddp_loop.py, python_fsdp_loop.py, python_pp_loop.py,
python_tp_loop.py): spawned, rank 0's figures collected, and a rank that dies first ending the run
instead of leaving it waiting; and what their ranks do alike (join the group, mlp's batches, the
timed steps, the report at the end)."""
import os
import socket
import sys
import time
from queue import Empty

import torch.multiprocessing as mp

# Debian trixie's torch 2.6 is built without libuv, which TCPStore asks for by default since 2.4:
# every peer that rendezvous imports this module first.
os.environ.setdefault("USE_LIBUV", "0")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(name, rank_main, world, args):
    """Starts `rank_main(rank, world, port, *args, queue)` for each rank and returns (what rank 0 put
    on the queue, exit code): (None, 1) after saying in one line which ranks ended without it."""
    ctx = mp.get_context("spawn")  # never fork a process that may have started threads
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, world, port, *args, queue)) for r in range(world)]
    for p in procs:
        p.start()
    figures = None
    while figures is None:
        try:
            figures = queue.get(timeout=1)
        except Empty:
            if any(p.exitcode not in (None, 0) for p in procs) or all(p.exitcode is not None for p in procs):
                for p in procs:
                    p.kill()
                print(f"{name}: a rank ended without results: exit codes "
                      + ", ".join(str(p.exitcode) for p in procs), file=sys.stderr)
                return None, 1
    for p in procs:
        p.join()
    return figures, 0 if all(p.exitcode == 0 for p in procs) else 1


def join_gloo_group(rank, world, port, threads):
    """What every peer rank does first: pins itself to its own cores where the host has enough (as
    ddpbench pins its ranks), takes `threads` intra-op threads and joins the world's Gloo group."""
    import torch
    import torch.distributed as dist
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= world * threads:
        os.sched_setaffinity(0, cores[rank * threads:(rank + 1) * threads])
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)


def timed_steps(step, warmup, steps):
    """Runs step(k) for k = 0 .. warmup + steps - 1; each measured step's time, in ms."""
    times = []
    for k in range(warmup + steps):
        start = time.perf_counter()
        step(k)
        if k >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    return times



class MlpBatches:
    """mlp's synthetic data as the peer loops draw it (one seed, 32 batches of N(0, 1) inputs [784]
    and labels in [0, 10)), and step k's indices into it, reshuffled each 32 steps as ddpbench's
    loader starts a new epoch."""

    def __init__(self, batch):
        import torch
        gen = torch.Generator().manual_seed(42)
        self.batch, self.size = batch, 32 * batch
        self.inputs = torch.randn(self.size, 784, generator=gen)
        self.labels = torch.randint(0, 10, (self.size,), generator=gen)
        self._perm = None

    def indices(self, k):
        import torch
        if k % 32 == 0 or self._perm is None:
            self._perm = torch.randperm(self.size, generator=torch.Generator().manual_seed(k // 32))
        return self._perm[(k % 32) * self.batch:(k % 32 + 1) * self.batch]


def report_and_leave(rank, queue, figures):
    """Rank 0's figures onto the queue; then every rank leaves the group together."""
    import torch.distributed as dist
    if rank == 0:
        queue.put(figures)
    dist.barrier()
    dist.destroy_process_group()
