"""Where the tests find the checkout and the build: DDPBENCH_BUILD_DIR when set (scripts/test.sh
sets it; the LibTorch 2.x leg builds into build-libtorch2/), else build/ in the checkout."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("DDPBENCH_BUILD_DIR") or os.path.join(ROOT, "build")
