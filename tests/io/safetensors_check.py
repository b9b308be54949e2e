#!/usr/bin/env python3
"""Two-way safetensors interop: the safetensors package writes a file that
docmatch reads, docmatch writes one that the package loads; both hold the
same known tensors (see safetensors_test.cpp).

usage: safetensors_check.py TRAIN_TESTS_BINARY SCRATCH_DIR
"""
import os
import shutil
import subprocess
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file


def known():
    return {
        "a.weight": torch.arange(12, dtype=torch.float32).view(3, 4) / 7,
        "b.ids": torch.tensor([-1, 2, 3, -4], dtype=torch.int64).view(2, 2),
        "c.half": torch.tensor([0.5, -2.0, 1024.0]).to(torch.bfloat16),
        "d.flags": torch.tensor([True, False, True]),
        "e.scalar": torch.tensor(3.25, dtype=torch.float64),
    }


def main():
    binary, scratch = sys.argv[1], sys.argv[2]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    python_file, docmatch_file = os.path.join(scratch, "python.safetensors"), os.path.join(scratch, "docmatch.safetensors")
    save_file(known(), python_file, metadata={"written_by": "python"})
    result = subprocess.run([binary, "--gtest_also_run_disabled_tests",
                             "--gtest_filter=Safetensors.DISABLED_ExchangesFilesWithThePythonPackage"],
                            env=dict(os.environ, DOCMATCH_ST_OUT=docmatch_file, DOCMATCH_ST_IN=python_file),
                            capture_output=True, text=True)
    assert result.returncode == 0 and "1 test" in result.stdout and "SKIPPED" not in result.stdout, result.stdout
    loaded = load_file(docmatch_file)
    expected = known()
    assert sorted(loaded) == sorted(expected), sorted(loaded)
    for name, tensor in expected.items():
        assert loaded[name].dtype == tensor.dtype, (name, loaded[name].dtype)
        assert loaded[name].shape == tensor.shape, (name, loaded[name].shape)
        assert torch.equal(loaded[name], tensor), name
    with safe_open(docmatch_file, framework="pt") as f:
        assert f.metadata() == {"written_by": "docmatch"}, f.metadata()
    print(f"ok: {len(expected)} tensors each way between docmatch and safetensors {__import__('safetensors').__version__}")


if __name__ == "__main__":
    main()
