#!/usr/bin/env python3
"""One error path (docs/DESIGN.md, "Errors"): every check of src/ that input
can fail throws docmatch::Error, and nothing in src/ aborts the process.

Fails on, in any .h or .cpp under SRC_DIR:
  - glog's aborting checks: CHECK(...), CHECK_EQ/NE/LT/LE/GT/GE(...),
    DCHECK..., LOG(FATAL), PCHECK;
  - a TORCH_CHECK whose message starts with a stage ("[data] ..."): a message
    for the user, which must be DOCMATCH_CHECK(condition, "data", ...);
  - a `throw std::runtime_error("[stage] ...")` or `std::invalid_argument`
    likewise, which must be `throw Error("stage", ...)`. std::logic_error
    stays for what only a bug of docmatch's own can reach.

usage: error_path_check.py SRC_DIR     check the tree, print every violation
       error_path_check.py --self-test prove on made-up sources that each is caught
"""
import os
import re
import sys
import tempfile

RULES = [
    (re.compile(r"(?<![A-Z_])(?:D?CHECK(?:_(?:EQ|NE|LT|LE|GT|GE|NOTNULL))?|PCHECK)\s*\("),
     "glog's CHECK aborts the process: throw docmatch::Error (DOCMATCH_CHECK) instead"),
    (re.compile(r"LOG\s*\(\s*FATAL\s*\)"), "LOG(FATAL) aborts the process: throw docmatch::Error instead"),
    (re.compile(r"TORCH_CHECK\s*\((?:[^;]*?),\s*\"\[[a-z-]+\]", re.S),
     "a TORCH_CHECK with a stage in its message: use DOCMATCH_CHECK(condition, \"stage\", ...)"),
    (re.compile(r"throw\s+std::(?:runtime_error|invalid_argument)\s*\(\s*(?:std::string\()?\"\[[a-z-]+\]"),
     "a std exception with a stage in its message: throw Error(\"stage\", ...)"),
]
COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def violations(src):
    found = []
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".h", ".cpp")):
                continue
            path = os.path.join(dirpath, name)
            text = open(path, encoding="utf-8").read()
            code = COMMENT_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
            for pattern, why in RULES:
                for match in pattern.finditer(code):
                    line = code.count("\n", 0, match.start()) + 1
                    found.append(f"{os.path.relpath(path, src)}:{line}: {why}")
    return found


def self_test():
    cases = {
        "glog.cpp": ("  CHECK(ok) << \"no\";\n", 1),
        "glog_eq.cpp": ("  CHECK_EQ(a, b);\n", 1),
        "fatal.cpp": ("  LOG(FATAL) << \"x\";\n", 1),
        "staged_torch.cpp": ("  TORCH_CHECK(n > 0, \"[data] no documents in \", path);\n", 1),
        "staged_throw.cpp": ("  throw std::runtime_error(\"[ckpt] '\" + path + \"' is missing\");\n", 1),
        "staged_string.cpp": ("  throw std::invalid_argument(std::string(\"[search] --k \") + k);\n", 1),
        # What is allowed: docmatch's own check, an unstaged TORCH_CHECK of an
        # invariant, a commented CHECK, an unstaged std exception.
        "fine.cpp": ("  DOCMATCH_CHECK(n > 0, \"data\", \"no documents\");\n"
                     "  TORCH_CHECK(x.dim() == 2, \"rows expected\");\n"
                     "  // CHECK(ok) in a comment\n"
                     "  throw std::runtime_error(\"cannot open '\" + path + \"'\");\n"
                     "  throw std::logic_error(\"[data] a bug: the windows do not cover the share\");\n", 0),
    }
    with tempfile.TemporaryDirectory() as root:
        for name, (text, _) in cases.items():
            with open(os.path.join(root, name), "w") as f:
                f.write(text)
        found = violations(root)
        for name, (_, expected) in cases.items():
            got = sum(1 for v in found if v.startswith(name + ":"))
            if got != expected:
                sys.exit(f"FAILED: {name}: {got} violations, expected {expected}: {found}")
    print(f"self-test: {len(cases)} made-up sources, each violation caught, the allowed forms pass")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    found = violations(sys.argv[1])
    if found:
        sys.exit("FAILED: " + str(len(found)) + " checks off the one error path:\n" + "\n".join(found))
    print("every user-facing check of", sys.argv[1], "throws docmatch::Error; nothing aborts")


if __name__ == "__main__":
    main()
