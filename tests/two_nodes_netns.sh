#!/bin/bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair, two ddp ranks in each,
# launched through the external (torchrun-style) path with MASTER_ADDR on the first. The run must
# match the same four ranks on one host. Exit 77 (CTest's skip) where namespaces cannot be made.
#   two_nodes_netns.sh PATH/TO/ddpbench
set -u
exe=$1
py=/usr/bin/python3
if [ "$(id -u)" != 0 ]; then echo "skip: creating network namespaces needs root"; exit 77; fi
if ! command -v ip >/dev/null; then echo "skip: no ip(8) to create network namespaces"; exit 77; fi
id=$$
ns_a=ddpbench-a-$id ns_b=ddpbench-b-$id if_a=dba$id if_b=dbb$id
tmp=$(mktemp -d)
cleanup() { ip netns del "$ns_a" 2>/dev/null; ip netns del "$ns_b" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
if ! ip netns add "$ns_a" 2>/dev/null || ! ip netns add "$ns_b" 2>/dev/null; then
  echo "skip: cannot create network namespaces here"; exit 77
fi
set -e
ip link add "$if_a" netns "$ns_a" type veth peer name "$if_b" netns "$ns_b"
ip -n "$ns_a" addr add 10.231.7.1/24 dev "$if_a"
ip -n "$ns_b" addr add 10.231.7.2/24 dev "$if_b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$if_a" up
ip -n "$ns_b" link set "$if_b" up
set +e

common=(--strategy ddp --workload mlp --device cpu --steps 4 --warmup 1 --repetitions 1 --batch 16
        --dataset-size 64 --threads 1 --parity-steps 3 --timeout 60)
pids=()
for node in 0 1; do
  ns=$ns_a iface=$if_a
  if [ $node = 1 ]; then ns=$ns_b iface=$if_b; fi
  for local in 0 1; do
    rank=$((node * 2 + local))
    json=(--no-json)
    if [ $rank = 0 ]; then json=(--json "$tmp/two-nodes.json"); fi
    ip netns exec "$ns" env RANK=$rank WORLD_SIZE=4 LOCAL_RANK=$local LOCAL_WORLD_SIZE=2 \
      MASTER_ADDR=10.231.7.1 MASTER_PORT=29511 GLOO_SOCKET_IFNAME="$iface" \
      "$exe" "${common[@]}" "${json[@]}" >"$tmp/rank$rank.out" 2>"$tmp/rank$rank.err" &
    pids+=($!)
  done
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
if [ $status != 0 ]; then
  echo "FAIL: a rank of the two-node run failed"; tail -n 5 "$tmp"/rank*.err; exit 1
fi

# The same four ranks on one host, started by ddpbench itself.
if ! "$exe" "${common[@]}" --world-size 4 --json "$tmp/one-host.json" >"$tmp/one-host.out" 2>&1; then
  echo "FAIL: the one-host run failed"; tail -n 5 "$tmp/one-host.out"; exit 1
fi

"$py" - "$tmp/two-nodes.json" "$tmp/one-host.json" <<'PY'
import json, sys
def case(path):
    doc = json.load(open(path))
    (b,) = [b for b in doc["benchmarks"] if b["run_type"] == "iteration" and b["run_name"] == "mlp/ddp/world:4"]
    return b["ddpbench"]
two, one = case(sys.argv[1]), case(sys.argv[2])
assert two["status"] == "ok" and one["status"] == "ok", (two["status"], one["status"])
hosts = {r["host"] for r in two["ranks"]}
assert len(two["ranks"]) == 4, two["ranks"]
assert two["parity"]["within_tolerance"], two["parity"]
for key in ("first_loss", "final_loss"):
    a, b = two[key], one[key]
    assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), f"{key}: two nodes {a} vs one host {b}"
print(f"ok: two namespaces x two ranks match one host: final loss {two['final_loss']:.6f} vs {one['final_loss']:.6f}, "
      f"parity {two['parity']['max_rel_param_diff']:.1e}")
PY
