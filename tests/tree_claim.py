#!/usr/bin/env python3
"""One ctest run at a time in a build tree's tests/ folder.

The checks write fixed folders under build/tests/ and delete them when they
start, so a second ctest run in the same tree would delete the files the
first run's tests are reading. The fixture that every check requires
(tests/CMakeLists.txt) claims the folder for its ctest run (the parent of
this script) and releases it at the end; a second live run stops at the
claim, before any check deletes anything. A run that died leaves a claim
that the next run takes over.

usage: tree_claim.py claim|release FOLDER
"""
import fcntl
import os
import sys


def _live_ctest(pid):
    try:
        command = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0]
    except OSError:
        return False
    return os.path.basename(command) == b"ctest"


def claim(folder, ours=None):
    """Makes FOLDER the run `ours`'s (default: this script's parent), or
    exits naming the live ctest run that holds it."""
    ours = ours or os.getppid()
    os.makedirs(os.path.dirname(os.path.abspath(folder)), exist_ok=True)
    with open(folder.rstrip("/") + ".owner", "a+") as owner:
        fcntl.flock(owner, fcntl.LOCK_EX)  # two runs starting at once: one reads, then writes, at a time
        owner.seek(0)
        try:
            other = int(owner.read().split()[0])
        except (ValueError, IndexError):
            other = None
        if other not in (None, ours) and _live_ctest(other):
            sys.exit(f"FAILED: another ctest run (pid {other}) is using {folder}; wait for it to end, or test in "
                     "another build tree (DOCMATCH_BUILD_DIR)")
        owner.seek(0)
        owner.truncate()
        owner.write(f"{ours}\n")


def release(folder, ours=None):
    """Removes the claim if it is the run `ours`'s."""
    ours = ours or os.getppid()
    path = folder.rstrip("/") + ".owner"
    try:
        with open(path, "r+") as owner:
            fcntl.flock(owner, fcntl.LOCK_EX)
            if owner.read().split()[:1] == [str(ours)]:
                os.remove(path)
    except FileNotFoundError:
        pass


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("claim", "release"):
        sys.exit(__doc__)
    (claim if sys.argv[1] == "claim" else release)(sys.argv[2])
