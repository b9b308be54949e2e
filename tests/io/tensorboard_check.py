#!/usr/bin/env python3
"""Runs the C++ event writer, then reads its file with the tensorboard package
and checks every scalar: tags, steps and values (float32) as logged.

usage: tensorboard_check.py TRAIN_TESTS_BINARY SCRATCH_DIR
"""
import os
import shutil
import subprocess
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main():
    binary, scratch = sys.argv[1], sys.argv[2]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    subprocess.run([binary, "--gtest_filter=EventWriter.*"], check=True, env=dict(os.environ, DOCMATCH_TB_DIR=scratch),
                   stdout=subprocess.DEVNULL)
    accumulator = EventAccumulator(scratch)
    accumulator.Reload()
    tags = sorted(accumulator.Tags()["scalars"])
    assert tags == ["train/loss", "train/lr"], tags
    for tag, expected in (("train/loss", lambda s: 1.0 / (s + 1)), ("train/lr", lambda s: s * 1e-4)):
        events = accumulator.Scalars(tag)
        assert [e.step for e in events] == list(range(20)), [e.step for e in events]
        for e in events:
            assert abs(e.value - expected(e.step)) <= 1e-7 * max(1.0, abs(expected(e.step))), (tag, e.step, e.value)
    print(f"ok: {len(tags)} tags x 20 steps read back by tensorboard")


if __name__ == "__main__":
    main()
