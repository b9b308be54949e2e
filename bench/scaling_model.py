#!/usr/bin/env python3
"""Weak-scaling projection for data-parallel SMITH pre-training on GPUs.

A model on paper, not a measurement: it combines the bytes docmatch moves per
step (measured: the gradient from the parameter count `comm_bench` prints, the
gathered block vectors from the batch shape) with link figures from the
hardware's data sheets and a per-step compute time that is still a prediction
until a GPU run measures it. bench/NOTES.md ("Scaling on paper") explains the
terms; every input is a flag, so the table can be redone with measured ones.

Per step and GPU, at N GPUs (8 per node; N <= 8 stays on NVLink):
  compute        c = flops_per_step / (mfu * peak); backward is 2/3 of it
  gradient sync  buckets all-reduced on one stream as backward fills them
                 (gradients appear uniformly over backward, in bucket order);
                 only what runs past the end of backward is exposed
  global negatives  an all-gather of each rank's masked-block vectors in the
                 forward and a reduce-scatter of their gradient in backward,
                 both on the critical path, plus the extra scoring work
  ring time      all-reduce 2(N-1)(a + S/(N b)); all-gather or reduce-scatter
                 of p bytes per rank (N-1)(a + p/b); a and b of the slowest
                 hop (InfiniBand once the ring leaves the node)
  hierarchical   gradients: reduce-scatter in the node (NVLink), all-reduce
                 of 1/8 of the bytes across nodes (every GPU has its own
                 NIC), all-gather in the node; negatives: all-gather across
                 nodes between GPUs of one local rank, then in the node
  efficiency     c / (c + exposed communication + extra scoring)

usage: scaling_model.py [--mfu 0.2] [--gradient-bytes ...] [--json]
"""
import argparse
import json


def ring_all_reduce(size, ranks, bandwidth, latency):
    if ranks == 1:
        return 0.0
    return 2 * (ranks - 1) * (latency + size / (ranks * bandwidth))


def ring_gather(per_rank, ranks, bandwidth, latency):
    """All-gather, or reduce-scatter, of `per_rank` bytes each rank holds or keeps."""
    if ranks == 1:
        return 0.0
    return (ranks - 1) * (latency + per_rank / bandwidth)


def nvlink(args):
    """Bandwidth (bytes/s) and per-hop latency (s) inside a node."""
    return args.nvlink_gbps * 1e9, args.nvlink_latency_us * 1e-6


def infiniband(args):
    """Bandwidth (bytes/s) and per-hop latency (s) between nodes."""
    return args.ib_gbps * 1e9, args.ib_latency_us * 1e-6


def link(ranks, args):
    """The slowest hop of a flat ring over `ranks` GPUs."""
    return nvlink(args) if ranks <= args.gpus_per_node else infiniband(args)


def all_reduce(size, ranks, args, hierarchical):
    if not hierarchical or ranks <= args.gpus_per_node:
        return ring_all_reduce(size, ranks, *link(ranks, args))
    local = args.gpus_per_node
    inside = 2 * ring_gather(size / local, local, *nvlink(args))  # reduce-scatter + all-gather
    across = ring_all_reduce(size / local, ranks // local, *infiniband(args))
    return inside + across


def gather(per_rank, ranks, args, hierarchical):
    """All-gather (or reduce-scatter) of the global negatives, `per_rank` bytes a rank."""
    if not hierarchical or ranks <= args.gpus_per_node:
        return ring_gather(per_rank, ranks, *link(ranks, args))
    local, nodes = args.gpus_per_node, ranks // args.gpus_per_node
    # Across nodes between GPUs of the same local rank (each on its own NIC),
    # then the node's GPUs share what each gathered.
    return ring_gather(per_rank, nodes, *infiniband(args)) + ring_gather(per_rank * nodes, local, *nvlink(args))


def exposed_sync(ranks, backward, args, hierarchical, bytes_per_value):
    """Seconds the bucketed gradient all-reduce runs past the end of backward.
    Buckets hold --bucket-mb of fp32 gradient (as the synchronizer's do) and
    travel at `bytes_per_value` (4, or 2 for bf16)."""
    bucket = args.bucket_mb * 2**20
    sizes = []
    left = args.gradient_bytes
    while left > 0:
        sizes.append(min(bucket, left))
        left -= sizes[-1]
    filled, stream_free = 0.0, 0.0
    for size in sizes:
        filled += size
        ready = backward * filled / args.gradient_bytes
        sent = size * bytes_per_value / 4
        stream_free = max(stream_free, ready) + all_reduce(sent, ranks, args, hierarchical)
    return max(0.0, stream_free - backward)


def step(ranks, args, batch, hierarchical=False, bf16_gradients=False):
    peak = args.peak_tflops * 1e12
    compute = args.gflop_per_document * 1e9 * batch / (args.mfu * peak)
    backward = compute * 2 / 3
    sync = exposed_sync(ranks, backward, args, hierarchical, 2 if bf16_gradients else 4)
    gathered = args.masked_blocks * batch * args.hidden * 4
    negatives = 2 * gather(gathered, ranks, args, hierarchical)  # forward gather, backward reduce-scatter
    # Scoring P local predictions against N*P candidates, forward and backward.
    p = args.masked_blocks * batch
    scoring = 3 * 2 * p * (ranks - 1) * p * args.hidden / (args.mfu * peak)
    total = compute + sync + negatives + scoring
    return {
        "gpus": ranks,
        "batch": batch,
        "hierarchical": hierarchical,
        "bf16_gradients": bf16_gradients,
        "compute_ms": compute * 1e3,
        "exposed_gradient_sync_ms": sync * 1e3,
        "global_negatives_ms": negatives * 1e3,
        "extra_scoring_ms": scoring * 1e3,
        "step_ms": total * 1e3,
        "efficiency": compute / total,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Measured here (comm_bench --sections overlap: 11,505,280 parameters).
    parser.add_argument("--gradient-bytes", type=float, default=11_505_280 * 4)
    parser.add_argument("--batch", type=int, nargs="+", default=[32, 128],
                        help="documents per GPU (the paper's 32, and a larger one)")
    parser.add_argument("--masked-blocks", type=int, default=2, help="masked sentence blocks per document")
    parser.add_argument("--hidden", type=int, default=256)
    # Measured on CPU (bench/NOTES.md): FLOPs of one paper-config document's step.
    parser.add_argument("--gflop-per-document", type=float, default=37.5)
    # Predictions until a GPU run measures them.
    parser.add_argument("--mfu", type=float, default=0.2, help="model FLOP utilisation of the step")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="H100 SXM dense bf16")
    parser.add_argument("--bucket-mb", type=float, default=25.0)
    # Data-sheet links: NVLink 4 (450 GB/s a direction, 80%% reached), one
    # 400 Gb/s InfiniBand NIC per GPU (50 GB/s, 90%% reached).
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--nvlink-gbps", type=float, default=360.0)
    parser.add_argument("--nvlink-latency-us", type=float, default=3.0)
    parser.add_argument("--ib-gbps", type=float, default=45.0)
    parser.add_argument("--ib-latency-us", type=float, default=6.0)
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 8, 64, 512])
    parser.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    args = parser.parse_args()

    rows = []
    for batch in args.batch:
        for hierarchical, bf16 in [(False, False), (True, False), (True, True)]:
            for ranks in args.gpus:
                rows.append(step(ranks, args, batch, hierarchical, bf16))
    if args.json:
        for row in rows:
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}))
        return
    print("| batch/GPU | collectives | GPUs | compute ms | exposed grad sync ms | global negatives ms | step ms | efficiency |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        kind = ("hierarchical" if r["hierarchical"] else "flat ring") + (", bf16 grads" if r["bf16_gradients"] else "")
        print(f"| {r['batch']} | {kind} | {r['gpus']} | {r['compute_ms']:.2f} | {r['exposed_gradient_sync_ms']:.2f} | "
              f"{r['global_negatives_ms']:.3f} | {r['step_ms']:.2f} | {r['efficiency']:.0%} |")


if __name__ == "__main__":
    main()
