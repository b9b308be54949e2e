#!/usr/bin/env python3
"""bench/profile_table.py on a Chrome trace written by hand, its figures
worked out by hand: operators' self time (their time less the ops they
called, per thread), the GPU's busy time as the union of its intervals, the
host waits, and a training run's steps (--profile-steps): each step's wall
time, its leaf ops (work, no working callee: a launch proxy), and the GPU
work it launched (each activity by its launch's correlation id).

usage: profile_table_check.py SCRATCH_DIR
"""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "profile_table.py")


def span(name, cat, ts, dur, tid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def main():
    scratch = sys.argv[1]
    os.makedirs(scratch, exist_ok=True)
    # Two steps of 1,000 us each on the host (thread 1). In step 1 aten::linear
    # (0-400) calls aten::mm (100-300) and launches two kernels (runtime
    # calls at 20 and 30, 10 us each): self times 180 and 200. In step 2
    # aten::mm (1,100-1,300), MmBackward0 calling aten::mm (80 of its 100
    # us), TBackward0 calling aten::t (20 of 40) and an aten::view (10). The
    # autograd engine's device thread (2) runs one op in step 1, 50 us. Leaf
    # ops (work, no working callee): step 1 mm and index_select, step 2 the
    # two mm. GPU (its own thread): kernels at 150-350 and 300-500 and one at
    # 1,050-1,300, all launched in step 1 (the last at 880, though it runs in
    # step 2's span); a copy at 1,500-1,600 launched in step 2 (at 1,310),
    # and a fill at 1,650-1,700 with no launch recorded (its start decides:
    # step 2). Step 1's work: 350 + 250 us; step 2's: 100 + 50.
    def launch(ts, correlation):
        return dict(span("cudaLaunchKernel", "cuda_runtime", ts, 10), args={"correlation": correlation})

    def work(name, cat, ts, dur, correlation=None):
        event = span(name, cat, ts, dur, tid=7)
        if correlation is not None:
            event["args"] = {"correlation": correlation}
        return event

    events = [
        span("docmatch step 1", "user_annotation", 0, 1000),
        span("docmatch step 2", "user_annotation", 1000, 1000),
        span("docmatch step 1", "gpu_user_annotation", 150, 1050, tid=7),  # Kineto's copy on the GPU's timeline
        span("aten::linear", "cpu_op", 0, 400),
        launch(20, 1),
        launch(30, 2),
        span("aten::mm", "cpu_op", 100, 200),
        launch(880, 3),
        span("aten::mm", "cpu_op", 1100, 200),
        launch(1310, 4),
        span("MmBackward0", "cpu_op", 1400, 100),  # an autograd node through the op it calls
        span("aten::mm", "cpu_op", 1410, 80),
        span("TBackward0", "cpu_op", 1520, 40),  # one whose op is a view: no work of its own
        span("aten::t", "cpu_op", 1530, 20),
        span("aten::view", "cpu_op", 1600, 10),
        span("aten::index_select", "cpu_op", 10, 50, tid=2),
        span("cudaStreamSynchronize", "cuda_runtime", 1700, 100),
        work("sm90_gemm", "kernel", 150, 200, 1),
        work("sm90_gemm", "kernel", 300, 200, 2),
        work("elementwise", "kernel", 1050, 250, 3),
        work("Memcpy HtoD", "gpu_memcpy", 1500, 100, 4),
        work("Memset", "gpu_memset", 1650, 50),
    ]
    trace = os.path.join(scratch, "trace.json")
    with open(trace, "w") as f:
        json.dump({"traceEvents": events}, f)
    result = subprocess.run([sys.executable, SCRIPT, trace, "--top", "50"], capture_output=True, text=True)
    out = result.stdout
    failures = []

    def expect(condition, what):
        if not condition:
            failures.append(what)

    expect(result.returncode == 0, f"exit {result.returncode}: {result.stderr}")
    # The trace's span: from the first op (0) to the GPU's last activity (1,700).
    expect("GPU: busy 0.75 ms of a 1.70 ms step (44.1%), idle 0.95 ms; 5 kernels, copies and fills; "
           "host waits: cudaStreamSynchronize x1" in out, "the GPU line")
    expect("leaf ops: 4 (" in out, "the leaf ops: three mm and index_select")
    expect(re.search(r"^docmatch step 1: 1\.00 ms, 2 leaf ops, GPU work launched 0\.60 ms \(60\.0% of the step\), "
                     r"3 kernels, copies and fills$", out, re.M), "step 1: the three kernels it launched")
    expect(re.search(r"^docmatch step 2: 1\.00 ms, 2 leaf ops, GPU work launched 0\.15 ms \(15\.0% of the step\), "
                     r"2 kernels, copies and fills$", out, re.M), "step 2: its copy, and the fill by its start")
    rows = {m.group(1): (float(m.group(2)), int(m.group(3)))
            for m in re.finditer(r"^\| (\S+) \| ([0-9.]+) \| (\d+) \|", out, re.M)}
    expect(rows.get("aten::mm") == (0.48, 3), f"aten::mm: {rows.get('aten::mm')}")
    expect(rows.get("MmBackward0") == (0.02, 1) and rows.get("TBackward0") == (0.02, 1), "the autograd nodes")
    expect(rows.get("aten::linear") == (0.18, 1), f"aten::linear: {rows.get('aten::linear')}")
    expect(rows.get("aten::index_select") == (0.05, 1), f"aten::index_select: {rows.get('aten::index_select')}")
    # Each step's span holds what its ops and runtime calls leave: 1,000 -
    # 400 - 10, and 1,000 - 200 - 10 - 100 - 40 - 10 - 100 (the host's wait
    # in step 2). Kineto's copy of a step on the GPU's timeline is not a row.
    expect("| docmatch step 1 | 0.59 | 1 |" in out, "step 1's own time, one row")
    expect("| docmatch step 2 | 0.54 | 1 |" in out, "step 2's own time")
    if failures:
        print(out)
        for what in failures:
            print("FAILED:", what)
        sys.exit(1)
    print("profile_table.py: every figure as worked out by hand")


if __name__ == "__main__":
    main()
