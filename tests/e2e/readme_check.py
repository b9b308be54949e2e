#!/usr/bin/env python3
"""The README's commands, run as a user would: every command of its command
blocks ("From documents to search", Usage, "Starting from pretrained
weights") is read out of README.md and run in order in a scratch folder laid
out like the repository, so a README that no longer works fails CI.

What changes on the way, each for a reason written beside it below:
  * the user's own files (my-docs.jsonl, held-out.jsonl, new-pages.jsonl) are
    pages of the tiny manual-page fixture;
  * training runs 2 steps per command, at most 4 documents a batch, and the
    manual pages are the 240 nearest printf(3) (make-manpages.py --pages);
  * a few commands do not run, each named with why (set-up that the test
    command itself has just run, a model only the quickstart makes).
A rule that no longer matches a README command fails too, so the rules
cannot go stale. Beyond each exit status, a few products are checked.

usage: readme_check.py DOCMATCH FIXTURE SCRATCH
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.environ.get("DOCMATCH_MODELS", os.path.expanduser("~/.cache/docmatch/models"))

# (block title, the text the block follows in README.md)
BLOCKS = [("From documents to search", "**From documents to search**"),
          ("Usage", "## Usage"),
          ("Starting from pretrained weights", "### Starting from pretrained weights")]

# Commands that do not run here: (a regex of the command, why).
SKIPPED = [
    (r"^scripts/install-deps\.sh", "the README's test command (scripts/test.sh) has just run it"),
    (r"^scripts/build\.sh", "the README's test command (scripts/test.sh) has just run it"),
    (r"^~/\.cache/docmatch/venv/bin/python scripts/fetch-models\.py$", "install-deps.sh has just run it (the models are in ~/.cache/docmatch/models)"),
    (r"export --model checkpoints/quickstart/", "the quickstart's model: Readme.QuickstartEndToEnd runs that export"),
    (r"SentenceTransformer as S; .*models/manpages-minilm",
     "the quickstart's export: Readme.QuickstartEndToEnd loads it in sentence-transformers"),
]

# Text replaced in a command before it runs: (regex, replacement, why).
REWRITES = [
    (r"(make-manpages\.py --output data/manpages)$", r"\1 --pages 240",
     "the 240 pages nearest printf(3), not all 1,200: the same script, a minute less"),
    (r"venv/bin/pip install \./python", "venv/bin/pip install -q --no-deps --no-build-isolation --target site ./python",
     "installs beside the test, leaving the venv as it is"),
    (r"~/\.cache/docmatch/venv/bin/docmatch-encode", "PYTHONPATH=$PWD/site site/bin/docmatch-encode",
     "the package installed beside the test"),
]

# The user's own files the README names, and the fixture pages standing in.
USER_FILES = {"my-docs.jsonl": "articles.jsonl", "held-out.jsonl": "held-out.jsonl",
              "new-pages.jsonl": "held-out.jsonl"}

TRAINING = re.compile(r"^(build/src/docmatch (pretrain|finetune)|launch/(pretrain|finetune)\.sh)\s")
MAX_BATCH = 4


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def readme_commands():
    """(block, command) in README order: continuation lines joined, comment
    lines dropped."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    out = []
    for block, marker in BLOCKS:
        start = text.find(marker)
        check(start >= 0, f"README.md has no '{marker}' any more: update BLOCKS")
        fence = text.find("```sh\n", start)
        heading = re.search(r"^#{2,3} ", text[start + len(marker):fence], re.M)
        check(fence >= 0 and heading is None, f"no ```sh block in README.md's '{marker}' section: update BLOCKS")
        end = text.find("```\n", fence + 6)
        logical = ""
        for line in text[fence + 6:end].splitlines():
            if not logical and (not line.strip() or line.lstrip().startswith("#")):
                continue
            logical += line.rstrip()
            if logical.endswith("\\"):
                logical = logical[:-1].rstrip() + " "
                continue
            # A trailing comment goes: flags the test adds must not land in it.
            out.append((block, re.sub(r"\s+#\s[^'\"]*$", "", logical).strip()))
            logical = ""
    return out


def flag_value(command, flag):
    match = re.search(rf"(?:^|\s){re.escape(flag)}[ =](\S+)", command)
    return match.group(1) if match else None


def set_flag(command, flag, value):
    """--flag's value replaced, or --flag appended (for a launch/ script,
    after the `--` that passes it to docmatch)."""
    if flag_value(command, flag) is not None:
        return re.sub(rf"((?:^|\s){re.escape(flag)})[ =]\S+", rf"\g<1> {value}", command)
    if command.startswith("launch/") and not re.search(r"\s--(\s|$)", command):
        command += " --"
    return f"{command} {flag} {value}"


def run_folder(command, work):
    """The --run of a training command: the flag, else its config's `run:`."""
    run = flag_value(command, "--run")
    config = flag_value(command, "--config")
    stage = "finetune" if re.search(r"\bfinetune\b", command.split(" --")[0]) else "pretrain"
    if run is None and config:
        section = None
        for line in open(os.path.join(work, config)):
            if re.match(r"^\S", line):
                section = line.split(":")[0]
            match = re.match(r"\s+run:\s*(\S+)", line)
            if match and section == stage:
                run = match.group(1)
    return run


def shorten_training(command, work, trained):
    """2 more steps than the run has had in this test (a resumed run trains),
    at most MAX_BATCH documents a batch. Returns the command and its reason."""
    run = run_folder(command, work)
    trained[run] = trained.get(run, 0) + 2
    command = set_flag(command, "--steps", trained[run])
    batch = flag_value(command, "--batch-size")
    if batch is None or int(batch) > MAX_BATCH:
        command = set_flag(command, "--batch-size", MAX_BATCH)
    if flag_value(command, "--grad-cache") is not None:
        command = set_flag(command, "--grad-cache", 2)
    return command, f"2 steps more for {run}, batches of at most {MAX_BATCH}"


def prepare_workspace(work, fixture, docmatch):
    """A folder laid out like the repository: the built binary at
    build/src/docmatch, the project's configs, scripts, launch scripts and
    Python package, and the user's files."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "build", "src"))
    os.symlink(docmatch, os.path.join(work, "build", "src", "docmatch"))
    for folder in ("configs", "scripts", "launch", "python"):
        os.symlink(os.path.join(ROOT, folder), os.path.join(work, folder))
    for name, source in USER_FILES.items():
        shutil.copy(os.path.join(fixture, source), os.path.join(work, name))


def run_block(block, commands, work, figures):
    assignments, trained = [], {}
    env = dict(os.environ, DOCMATCH_BIN=os.path.join(work, "build", "src", "docmatch"))
    for original in commands:
        skip = [why for pattern, why in SKIPPED if re.search(pattern, original)]
        if skip:
            print(f"[readme] skipped: {original}\n          ({skip[0]})", flush=True)
            figures["skipped"] += 1
            continue
        if re.match(r"^[A-Z_]+=\S+$", original):
            assignments.append(original)
            continue
        command, reasons = original, []
        for pattern, replacement, why in REWRITES:
            if re.search(pattern, command):
                command = re.sub(pattern, replacement, command)
                reasons.append(why)
        if TRAINING.search(command) and "--dump-config" not in command:
            command, why = shorten_training(command, work, trained)
            reasons.append(why)
        print(f"[readme] {block}: {command}" + (f"\n          ({'; '.join(reasons)})" if reasons else ""),
              flush=True)
        started = time.time()
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(assignments + [command])], cwd=work,
                                env=env, capture_output=True, text=True)
        seconds = time.time() - started
        check(result.returncode == 0, f"the README's command failed (exit {result.returncode}, {seconds:.0f} s):\n"
              f"  {original}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}")
        figures["ran"] += 1
        figures["seconds"][original[:70]] = round(seconds, 1)
        yield original, result


PRODUCT_CHECKS = {"search --id", "search --text", "inspect run", "plot-run", "inspect export", "reference_vector"}


def check_products(original, result, work, done):
    """What a few commands must have made, beyond exiting 0; `done` collects
    the checks that ran (each must, or the README changed under it)."""
    if original.startswith("build/src/docmatch search") and "--id printf.3" in original:
        hits = result.stdout.splitlines()[2:]
        check(result.stdout.startswith("query: printf.3") and len(hits) >= 3 and
              all("(" in line for line in hits) and not any(line.split()[2] == "printf.3" for line in hits),
              f"search --id printf.3 shows other pages with their titles, not itself:\n{result.stdout}")
        done.add("search --id")
    if original.startswith("build/src/docmatch search") and "--text" in original:
        check(result.stdout.startswith("query: \"") and len(result.stdout.splitlines()) >= 3,
              f"a text query's hits:\n{result.stdout}")
        done.add("search --text")
    if original == "build/src/docmatch inspect checkpoints/smith-tiny-manpages":
        summary = json.loads(result.stdout)
        check(summary["stage"] == "pretrain" and summary["checkpoints"] and summary["train"]["logged"] > 0,
              f"inspect of a run: {summary}")
        done.add("inspect run")
    if "plot-run.py" in original:
        with open(os.path.join(work, "checkpoints", "smith-tiny-manpages", "curves.png"), "rb") as f:
            check(f.read(8) == b"\x89PNG\r\n\x1a\n", "plot-run.py wrote no PNG")
        panels = json.loads(result.stdout.strip().splitlines()[-1])
        check("train/block_top1" in panels["share_panel"] and "train/block_top1" not in panels["loss_panel"] and
              panels["grad_norm"], f"plot-run puts accuracies on their own axis, beside the gradient norm: {panels}")
        done.add("plot-run")
    if original.startswith("build/src/docmatch inspect models/smith-tiny"):
        summary = json.loads(result.stdout)
        check(summary["kind"] == "smith" and summary["stage"] == "export" and summary["tokenizer"]["file"] and
              summary["parameters"] > 0, f"inspect of an export: {summary}")
        done.add("inspect export")
    if "reference_vector.py" in original:
        worst = max(json.loads(line)["max_abs_difference"] for line in result.stdout.splitlines())
        check(worst < 1e-5, f"numpy's vector differs from embed's by {worst}")
        done.add("reference_vector")


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    commands = readme_commands()
    used = {pattern for pattern, _ in SKIPPED if any(re.search(pattern, c) for _, c in commands)}
    used |= {pattern for pattern, _, _ in REWRITES if any(re.search(pattern, c) for _, c in commands)}
    stale = [p for p, _ in SKIPPED if p not in used] + [p for p, _, _ in REWRITES if p not in used]
    check(not stale, f"rules that match no README command any more (update readme_check.py): {stale}")
    for name in USER_FILES:
        check(any(name in c for _, c in commands), f"README.md no longer names {name}: update USER_FILES")

    figures = {"commands": len(commands), "ran": 0, "skipped": 0, "seconds": {}}
    done = set()
    check(os.path.isfile(os.path.join(MODELS, "all-minilm-l6-v2", "model.safetensors")),
          f"no all-MiniLM-L6-v2 in {MODELS}: scripts/install-deps.sh fetches it (the README's commands import it)")
    started = time.time()
    # "From documents to search" stands alone (it imports models/minilm
    # itself); Usage and "Starting from pretrained weights" go on in one folder.
    for blocks, folder in ((["From documents to search"], "search"),
                           (["Usage", "Starting from pretrained weights"], "usage")):
        work = os.path.join(scratch, folder)
        prepare_workspace(work, fixture, docmatch)
        for block in blocks:
            for original, result in run_block(block, [c for b, c in commands if b == block], work, figures):
                check_products(original, result, work, done)
    check(done == PRODUCT_CHECKS, f"product checks that found no README command: {PRODUCT_CHECKS - done}")
    figures["total_seconds"] = round(time.time() - started, 1)
    print(json.dumps(figures))
    print(f"README commands: {figures['ran']} ran, {figures['skipped']} skipped (reasons above)")


if __name__ == "__main__":
    main()
