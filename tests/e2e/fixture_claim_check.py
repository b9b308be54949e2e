#!/usr/bin/env python3
"""Two test runs in one build tree: the e2e fixture (tiny_manpages.py) stops
when another live ctest run owns its folder, before deleting anything.

A process whose name is "ctest" (sleep, started under that name) owns the
fixture folder; the fixture must refuse naming its pid and leave the
folder's files where they were.

usage: fixture_claim_check.py SCRATCH
"""
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    scratch = sys.argv[1]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(os.path.join(scratch, "e2e"))
    kept = os.path.join(scratch, "e2e", "corpus-in-use")
    open(kept, "w").write("the first run's file\n")
    os.symlink(shutil.which("sleep"), os.path.join(scratch, "ctest"))
    owner = subprocess.Popen([os.path.join(scratch, "ctest"), "60"])
    try:
        time.sleep(0.2)
        open(os.path.join(scratch, "e2e.owner"), "w").write(f"{owner.pid}\n")
        result = subprocess.run([sys.executable, os.path.join(HERE, "tiny_manpages.py"), "/nonexistent/docmatch",
                                 os.path.join(scratch, "e2e")], capture_output=True, text=True, timeout=60)
        if not (result.returncode != 0 and f"another ctest run (pid {owner.pid})" in result.stderr and
                os.path.exists(kept)):
            sys.exit(f"FAILED: a second run's fixture went on: exit {result.returncode}\n{result.stderr[-1500:]}")
    finally:
        owner.kill()
        owner.wait()
    print(f'{{"refused_while_owned_by_pid": {owner.pid}}}')


if __name__ == "__main__":
    main()
