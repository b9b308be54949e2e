#!/usr/bin/env python3
"""Sums a Chrome trace from `smith_step --profile` by operator: self time
(the op's time less the ops it called, per thread), calls, and share of the
profiled step. Prints a Markdown table, largest self time first. A Kineto
trace of a CUDA step also gives the GPU's busy and idle time over the step
(the union of its kernels, copies and fills against the span from the first
operator to the last GPU activity) and the CUDA runtime calls that make the
host wait (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
a blocking cudaMemcpy). A trace of `pretrain`/`finetune --profile-steps A:B`
also gives each step's wall time, its leaf ops and, on a GPU, the busy time
and number of the kernels, copies and fills it launched.

  profile_table.py TRACE [--top 25]
"""
import argparse
import collections
import json


# Ops that make no work of their own: views, allocations, dtype queries.
NO_WORK = {
    "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::as_strided", "aten::transpose", "aten::t",
    "aten::narrow", "aten::slice", "aten::select", "aten::expand", "aten::unsqueeze", "aten::squeeze",
    "aten::permute", "aten::detach", "detach", "aten::detach_", "detach_", "aten::alias", "aten::empty",
    "aten::empty_strided", "aten::empty_like", "aten::resize_", "aten::_unsafe_view", "aten::unflatten",
    "aten::flatten", "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unbind", "aten::view_as",
    "aten::expand_as", "aten::lift_fresh", "aten::result_type", "aten::contiguous", "aten::to", "aten::movedim",
    "aten::resolve_conj", "aten::resolve_neg", "aten::promote_types", "aten::set_", "aten::scalar_tensor",
    "aten::mT", "aten::matrix_H", "aten::swapaxes", "aten::diagonal", "aten::as_strided_",
}


def union_length(intervals):
    """The length of the union of (start, end) intervals sorted by start."""
    total, reached = 0.0, None
    for a, b in intervals:
        if reached is None or a > reached:
            total += b - a
            reached = b
        elif b > reached:
            total += b - reached
            reached = b
    return total


def leaf_ops(events):
    """The start of every ATen op (cat cpu_op) that does work and calls no
    other op that does. On a CPU trace, where no kernels are recorded, a
    proxy for a step's launches, not a count: an op that runs a kernel of
    its own and also calls a working op (addmm copying its bias in) is not
    counted, an op that reads a value back (_local_scalar_dense) is, and
    copies to a device and communication do not show on a CPU."""
    by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            by_thread[e.get("tid")].append([float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"], False])
    starts = []
    for ops in by_thread.values():
        ops.sort(key=lambda o: (o[0], -o[1]))
        stack = []
        for op in ops:
            while stack and stack[-1][1] <= op[0]:
                stack.pop()
            if op[2] not in NO_WORK:
                for caller in stack:  # each caller calls an op that works
                    caller[3] = True
            stack.append(op)
        # An autograd node (MmBackward0, AccumulateGrad) works through the
        # aten ops it calls; one that calls none launches nothing.
        starts += [op[0] for op in ops if op[2].startswith("aten::") and op[2] not in NO_WORK and not op[3]]
    return starts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    text = open(args.trace).read().strip().rstrip(",")
    if text.startswith("{"):  # Kineto's trace: an object holding traceEvents
        events = json.loads(text)["traceEvents"]
    else:  # the legacy profiler's list, possibly unterminated
        events = json.loads(text if text.endswith("]") else text + "]")
    spans = collections.defaultdict(list)  # thread -> (start, end, name)
    for e in events:
        # Left out: Kineto's span of the whole trace, and the steps' copies on the GPU's timeline.
        if e.get("ph") == "X" and not e["name"].startswith("PyTorch Profiler") and e.get("cat") != "gpu_user_annotation":
            spans[e.get("tid")].append((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"]))
    self_us, calls = collections.Counter(), collections.Counter()
    wall = 0.0
    for thread_spans in spans.values():
        thread_spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []  # [end, name, time in children, duration]
        for start, end, name in thread_spans:
            while stack and stack[-1][0] <= start:
                done = stack.pop()
                self_us[done[1]] += done[3] - done[2]
            if stack:
                stack[-1][2] += end - start
            else:
                wall += end - start
            calls[name] += 1
            stack.append([end, name, 0.0, end - start])
        for done in stack:
            self_us[done[1]] += done[3] - done[2]
    print(f"profiled top-level time: {wall / 1e3:.1f} ms (all threads)\n")
    leaves = leaf_ops(events)
    # The GPU's kernels, copies and fills: (start, end, when the host launched
    # it: the runtime call with its correlation id, or its own start).
    launched = {e["args"]["correlation"]: float(e["ts"]) for e in events if e.get("ph") == "X" and
                e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    work = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"]),
                   launched.get(e.get("args", {}).get("correlation"), float(e["ts"]))) for e in events
                  if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    gpu = [(a, b) for a, b, _ in work]
    if gpu:
        busy = union_length(gpu)
        first = min(float(e["ts"]) for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op")
        span = max(b for _, b in gpu) - first
        waits = collections.Counter(e["name"] for e in events if e.get("cat") == "cuda_runtime" and e["name"] in (
            "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"))
        print(f"GPU: busy {busy / 1e3:.2f} ms of a {span / 1e3:.2f} ms step ({busy / span:.1%}), "
              f"idle {(span - busy) / 1e3:.2f} ms; {len(gpu)} kernels, copies and fills; host waits: "
              + (", ".join(f"{n} x{c}" for n, c in waits.most_common()) or "none") + "\n")
    # A training run's trace (--profile-steps) marks each step: its wall time,
    # its leaf ops, and the GPU work it launched (a kernel runs after its
    # launch, often in the next step's span: each goes to its launch's step).
    marks = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"]) for e in events if e.get("ph") == "X"
                   and e.get("cat") == "user_annotation" and e["name"].startswith("docmatch step"))
    for start, end, name in marks:
        line = f"{name}: {(end - start) / 1e3:.2f} ms, {sum(1 for t in leaves if start <= t < end)} leaf ops"
        if work:
            mine = [(a, b) for a, b, at in work if start <= at < end]
            busy = union_length(mine)
            line += (f", GPU work launched {busy / 1e3:.2f} ms ({busy / (end - start):.1%} of the step), "
                     f"{len(mine)} kernels, copies and fills")
        print(line)
    if marks:
        print()
    print(f"leaf ops: {len(leaves)} (ATen ops that call no other op that works; views and allocations left out)\n")
    print("| operator | self ms | calls | share |")
    print("|---|---|---|---|")
    for name, us in self_us.most_common(args.top):
        print(f"| {name} | {us / 1e3:.2f} | {calls[name]} | {us / wall:.1%} |")


if __name__ == "__main__":
    main()
