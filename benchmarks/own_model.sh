#!/usr/bin/env bash
# The "your own model" proof: torchvision's ResNet-50 exported by scripts/ddpbench-export with this
# machine's torch, then run by ddpbench under every strategy (hogwild's threads and its worker
# processes), the results and the table kept in OUTDIR.
#
# Usage: benchmarks/own_model.sh OUTDIR [IMAGE_SIZE [BATCH [FACTORY]]]
#   IMAGE_SIZE 224 and BATCH 64 are PyTorch's DDP benchmark's; on a 2-core CPU use 64 and 8.
#   FACTORY defaults to torchvision.models:resnet50. Extra ddpbench flags: DDPBENCH_FLAGS.
# Environment: DDPBENCH (the binary, default build/ddpbench), PYTHON (default /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: benchmarks/own_model.sh OUTDIR [IMAGE_SIZE [BATCH [FACTORY]]]}"
size="${2:-224}"
batch="${3:-64}"
factory="${4:-torchvision.models:resnet50}"
ddpbench="${DDPBENCH:-build/ddpbench}"
python="${PYTHON:-/usr/bin/python3}"
mkdir -p "$out"
name="$(echo "${factory##*:}" | tr '_' '-')"
model="$out/$name.pt"
# SGD at PyTorch's ImageNet recipe's rate for a batch of 256, scaled to this batch.
lr="$("$python" -c "print(0.1 * $batch / 256)")"
"$python" scripts/ddpbench-export "$factory" --input "float:3x${size}x${size}" --classes 1000 --batch "$batch" \
  --lr "$lr" --weight-decay 1e-4 -o "$model" | tee "$out/$name-export.txt"
# shellcheck disable=SC2086
"$ddpbench" --model "$model" --strategy all --json "$out/$name-results.json" ${DDPBENCH_FLAGS:-} | tee "$out/$name.txt"
# shellcheck disable=SC2086
"$ddpbench" --model "$model" --strategy hogwild --hogwild-mode processes --json "$out/$name-hogwild-processes-results.json" \
  ${DDPBENCH_FLAGS:-} | tee "$out/$name-hogwild-processes.txt"
rm -f "$model"  # the weights are the factory's, remade by the export; the sidecar stays with the results
