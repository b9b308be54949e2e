#!/usr/bin/env python3
"""scripts/quickstart.sh's environment variables (issue 64, rows 16 and 27):
a value that is not a whole number in range (a negative page count, "abc"
ranks or steps, zero steps) stops the script at once with exit 2 and a line
naming the variable, before it installs, renders or writes anything; a
leading zero ("08") is a decimal number, not an octal error.

usage: quickstart_env_check.py REPO SCRATCH
"""
import os
import shutil
import subprocess
import sys

CASES = [("DOCMATCH_QUICKSTART_PAGES", "-5"), ("DOCMATCH_QUICKSTART_PAGES", "many"), ("DOCMATCH_RANKS", "abc"),
         ("DOCMATCH_RANKS", "0"), ("DOCMATCH_QUICKSTART_STEPS", "abc"), ("DOCMATCH_QUICKSTART_STEPS", "0"),
         ("DOCMATCH_QUICKSTART_STEPS", "1e3")]


def main():
    repo, scratch = sys.argv[1:3]
    shutil.rmtree(scratch, ignore_errors=True)
    for name, value in CASES:
        folder = os.path.join(scratch, f"{name}-{value}")
        env = dict(os.environ, DOCMATCH_QUICKSTART_SETUP="0", DOCMATCH_QUICKSTART_DIR=folder, **{name: value})
        done = subprocess.run([os.path.join(repo, "scripts", "quickstart.sh")], env=env, capture_output=True,
                              text=True, timeout=60)
        said = done.stdout + done.stderr
        if done.returncode != 2 or f"{name}='{value}' must be a whole number" not in said:
            sys.exit(f"FAILED: {name}={value}: exit {done.returncode}\n{said[-1500:]}")
        if os.path.exists(folder):
            sys.exit(f"FAILED: {name}={value} wrote {folder} before it was refused")
    print(f'{{"refused": {len(CASES)}}}')
    print("OK")


if __name__ == "__main__":
    main()
