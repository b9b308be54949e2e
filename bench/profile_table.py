#!/usr/bin/env python3
"""Sums a Chrome trace from `smith_step --profile` by operator: self time
(the op's time less the ops it called, per thread), calls, and share of the
profiled step. Prints a Markdown table, largest self time first. A Kineto
trace of a CUDA step also gives the GPU's busy and idle time over the step
(the union of its kernels, copies and fills against the span from the first
operator to the last GPU activity) and the CUDA runtime calls that make the
host wait (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
a blocking cudaMemcpy). A trace of `pretrain`/`finetune --profile-steps A:B`
also gives each step's wall time and, on a GPU, its busy time and launches.

  profile_table.py TRACE [--top 25]
"""
import argparse
import collections
import json


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
        if e.get("ph") == "X" and not e["name"].startswith("PyTorch Profiler"):  # Kineto's span of the whole trace
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
    gpu = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
                 if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    if gpu:
        busy, end = 0.0, None
        for a, b in gpu:  # the union of the GPU's intervals
            if end is None or a > end:
                busy += b - a
                end = b
            elif b > end:
                busy += b - end
                end = b
        first = min(float(e["ts"]) for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op")
        span = max(b for _, b in gpu) - first
        waits = collections.Counter(e["name"] for e in events if e.get("cat") == "cuda_runtime" and e["name"] in (
            "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"))
        print(f"GPU: busy {busy / 1e3:.2f} ms of a {span / 1e3:.2f} ms step ({busy / span:.1%}), "
              f"idle {(span - busy) / 1e3:.2f} ms; {len(gpu)} kernels, copies and fills; host waits: "
              + (", ".join(f"{n} x{c}" for n, c in waits.most_common()) or "none") + "\n")
    # A training run's trace (--profile-steps) marks each step: its wall time,
    # and the GPU's busy time and activities that start within it.
    marks = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"]) for e in events
                   if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e["name"].startswith("docmatch step"))
    for start, end, name in marks:
        line = f"{name}: {(end - start) / 1e3:.2f} ms"
        if gpu:
            inside = [(max(a, start), min(b, end)) for a, b in gpu if b > start and a < end]
            busy, last = 0.0, start
            for a, b in inside:  # sorted by start: the union of the clipped intervals
                if b > last:
                    busy += b - max(a, last)
                    last = b
            begun = sum(1 for a, _ in gpu if start <= a < end)
            line += f", GPU busy {busy / 1e3:.2f} ms ({busy / (end - start):.1%}), {begun} kernels, copies and fills"
        print(line)
    if marks:
        print()
    print("| operator | self ms | calls | share |")
    print("|---|---|---|---|")
    for name, us in self_us.most_common(args.top):
        print(f"| {name} | {us / 1e3:.2f} | {calls[name]} | {us / wall:.1%} |")


if __name__ == "__main__":
    main()
