"""Where the tests find the checkout and the build: DDPBENCH_BUILD_DIR when set (scripts/test.sh
sets it; the LibTorch 2.x leg builds into build-libtorch2/), else build/ in the checkout; and a short
real run of the built ddpbench for the tests that read what it writes."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("DDPBENCH_BUILD_DIR") or os.path.join(ROOT, "build")


def small_run(results, strategies, world=2, workload="mlp", extra=()):
    """ddpbench on CPU at `world`, a few steps of a small batch, no parity pass, JSON into `results`;
    `extra`: more flags."""
    run = subprocess.run([os.path.join(BUILD, "ddpbench"), "--device", "cpu", "--world-size", str(world),
                          "--workload", workload, "--strategy", strategies, "--steps", "3", "--warmup", "1",
                          "--repetitions", "1", "--batch", "16", "--dataset-size", "64", "--parity-steps", "0",
                          "--json", str(results), *extra], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
