#!/usr/bin/env python3
"""Two test runs in one build tree: the claim every check requires
(tree_claim.py) stops a second run while another live ctest run holds the
folder, before anything is deleted; it takes over the claim of a run that
died, and releases only its own.

A process whose name is "ctest" (sleep, started under that name) holds the
folder; the claim must refuse naming its pid and leave the folder's files
where they were. Once that process is gone the claim is ours.

usage: tree_claim_check.py SCRATCH
"""
import os
import shutil
import subprocess
import sys
import time

CLAIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tree_claim.py")


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def claim(action, folder):
    return subprocess.run([sys.executable, CLAIM, action, folder], capture_output=True, text=True, timeout=60)


def main():
    scratch = sys.argv[1]
    shutil.rmtree(scratch, ignore_errors=True)
    tree = os.path.join(scratch, "tests")
    os.makedirs(os.path.join(tree, "e2e"))
    kept = os.path.join(tree, "e2e", "corpus-in-use")
    open(kept, "w").write("the first run's file\n")
    os.symlink(shutil.which("sleep"), os.path.join(scratch, "ctest"))
    owner = subprocess.Popen([os.path.join(scratch, "ctest"), "60"])
    try:
        time.sleep(0.2)
        open(tree + ".owner", "w").write(f"{owner.pid}\n")
        refused = claim("claim", tree)
        check(refused.returncode != 0 and f"another ctest run (pid {owner.pid})" in refused.stderr and
              os.path.exists(kept), f"a second run's claim went on: exit {refused.returncode}\n{refused.stderr}")
        claim("release", tree)  # not ours to release
        check(open(tree + ".owner").read().split() == [str(owner.pid)], "a release removed another run's claim")
    finally:
        owner.kill()
        owner.wait()
    taken = claim("claim", tree)  # the holder is gone: the claim is this script's (the claim's parent)
    check(taken.returncode == 0 and open(tree + ".owner").read().split() == [str(os.getpid())],
          f"a dead run's claim was not taken over: exit {taken.returncode}\n{taken.stderr}")
    claim("release", tree)
    check(not os.path.exists(tree + ".owner"), "release left the run's own claim")
    print(f'{{"refused_while_held_by_pid": {owner.pid}, "taken_over_after_exit": true}}')


if __name__ == "__main__":
    main()
