#!/usr/bin/env python3
"""The include side of the layering check (tests/layout/CMakeLists.txt).

Each folder of src/ with a CMakeLists.txt defines one target; its
target_link_libraries() names the docmatch targets it may use. A source file
may include headers of its own folder and of the folders its target reaches
through those links, nothing else; the declared links must not form a cycle.

With --design, the layout table of docs/DESIGN.md (rows of
| `folder/` | `library` | links |) must list exactly the links each folder's
CMakeLists.txt declares, so the design document cannot drift from the build.

usage: layering_check.py SRC_DIR [--design DESIGN.md]
                                      check the tree, print every violation
       layering_check.py --self-test  prove, on made-up trees, that a wrong-way
                                      include, a cycle and a stale design
                                      table are caught
"""
import os
import re
import sys
import tempfile

TARGET_RE = re.compile(r"add_(?:library|executable)\(\s*(\w+)")
LINK_RE = re.compile(r"target_link_libraries\(\s*(\w+)([^)]*)\)", re.S)
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_targets(src):
    """folder (relative to src, '/'-separated) -> (target, set of linked docmatch targets)"""
    folders = {}
    for dirpath, _, files in os.walk(src):
        if "CMakeLists.txt" not in files:
            continue
        folder = os.path.relpath(dirpath, src).replace(os.sep, "/")
        text = open(os.path.join(dirpath, "CMakeLists.txt"), encoding="utf-8").read()
        text = re.sub(r"#[^\n]*", "", text)
        targets = TARGET_RE.findall(text)
        if folder == "." or not targets:
            continue
        target = targets[0]
        links = set()
        for name, args in LINK_RE.findall(text):
            if name == target:
                links |= {a for a in args.split() if a.startswith("docmatch_")}
        folders[folder] = (target, links)
    return folders


def closure(folders):
    """folder -> every folder it may include (itself excluded), or raises on a cycle"""
    by_target = {target: folder for folder, (target, _) in folders.items()}
    direct = {f: {by_target[t] for t in links if t in by_target} for f, (_, links) in folders.items()}
    reach = {}
    for start in direct:
        seen, todo = set(), list(direct[start])
        while todo:
            f = todo.pop()
            if f in seen:
                continue
            seen.add(f)
            todo.extend(direct[f])
        if start in seen:
            raise SystemExit(f"layering: the links of {start} lead back to it (a cycle): "
                             f"{start} -> {sorted(direct[start])}")
        reach[start] = seen
    return reach


def owner(path, folders):
    """The folder an include path or a source path belongs to: the longest folder prefix."""
    best = None
    for folder in folders:
        if path.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def violations(src):
    folders = read_targets(src)
    reach = closure(folders)
    found = []
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".h", ".cpp")):
                continue
            path = os.path.relpath(os.path.join(dirpath, name), src).replace(os.sep, "/")
            mine = owner(path, folders)
            if mine is None:
                continue
            text = open(os.path.join(dirpath, name), encoding="utf-8").read()
            for match in INCLUDE_RE.finditer(text):
                theirs = owner(match.group(1), folders)
                if theirs is None or theirs == mine or theirs in reach[mine]:
                    continue
                line = text.count("\n", 0, match.start()) + 1
                target, links = folders[mine]
                found.append(f"src/{path}:{line}: includes \"{match.group(1)}\" from {theirs}/, but {target} "
                             f"(src/{mine}/CMakeLists.txt) links {', '.join(sorted(links)) or 'no docmatch library'}")
    return folders, found


DESIGN_ROW_RE = re.compile(r"^\|\s*`([\w/]+)/`\s*\|\s*`(\w+)`[^|]*\|([^|]*)\|\s*$", re.M)


def design_mismatches(src, design):
    """Rows of the design's layout table that disagree with the CMakeLists."""
    folders = read_targets(src)
    by_target = {target: folder for folder, (target, _) in folders.items()}
    text = open(design, encoding="utf-8").read()
    rows = {m.group(1): (m.group(2), m.group(3)) for m in DESIGN_ROW_RE.finditer(text)}
    found = []
    for folder, (target, links) in sorted(folders.items()):
        declared = {by_target[t] for t in links if t in by_target}
        if folder not in rows:
            found.append(f"{design}: the layout table has no row for {folder}/ ({target})")
            continue
        name, written = rows[folder]
        written = re.sub(r"\([^)]*\)", "", written).strip()
        listed = set() if written.startswith("nothing") else {w.strip() for w in written.split(",") if w.strip()}
        if name != target or listed != declared:
            found.append(f"{design}: the row for {folder}/ says {name} links {sorted(listed) or 'nothing'}, "
                         f"but src/{folder}/CMakeLists.txt has {target} linking {sorted(declared) or 'nothing'}")
    for folder in sorted(set(rows) - set(folders)):
        found.append(f"{design}: the layout table lists {folder}/, which has no target in src/")
    return found


def check(src, design=None):
    folders, found = violations(src)
    if design:
        found += design_mismatches(src, design)
    for v in found:
        print(v)
    if found:
        print(f"layering: {len(found)} problem(s)")
        return 1
    print(f"layering: {len(folders)} folders, every include within its folder's declared dependencies"
          + (f", {design} agrees with the CMakeLists" if design else ""))
    return 0


def write(root, files):
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w", encoding="utf-8") as f:
            f.write(text)


def self_test():
    with tempfile.TemporaryDirectory() as root:
        write(root, {
            "low/CMakeLists.txt": "add_library(docmatch_low STATIC a.cpp)\n",
            "low/a.h": "#pragma once\n",
            "low/a.cpp": '#include "low/a.h"\n',
            "high/CMakeLists.txt": "add_library(docmatch_high STATIC b.cpp)\n"
                                   "target_link_libraries(docmatch_high PUBLIC docmatch_low)\n",
            "high/b.h": "#pragma once\n",
            "high/b.cpp": '#include "high/b.h"\n#include "low/a.h"\n',
        })
        _, found = violations(root)
        assert not found, f"a tree that follows its links was flagged: {found}"
        # The low folder reaches up: one violation, on the right line.
        write(root, {"low/a.cpp": '#include "low/a.h"\n// why\n#include "high/b.h"\n'})
        _, found = violations(root)
        assert len(found) == 1 and found[0].startswith("src/low/a.cpp:3:"), found
        # Declaring the wrong-way link instead makes a cycle, which is refused.
        write(root, {"low/CMakeLists.txt": "add_library(docmatch_low STATIC a.cpp)\n"
                                           "target_link_libraries(docmatch_low PRIVATE docmatch_high)\n"})
        try:
            violations(root)
        except SystemExit as e:
            assert "cycle" in str(e), e
        else:
            raise AssertionError("a cycle between two folders was not refused")
        # The design table must follow the CMakeLists: right, then stale.
        write(root, {"low/CMakeLists.txt": "add_library(docmatch_low STATIC a.cpp)\n",
                     "design.md": "| `low/` | `docmatch_low` | nothing of docmatch |\n"
                                  "| `high/` | `docmatch_high` | low (and more) |\n"})
        design = os.path.join(root, "design.md")
        assert not design_mismatches(root, design), design_mismatches(root, design)
        write(root, {"design.md": "| `low/` | `docmatch_low` | high |\n"
                                  "| `high/` | `docmatch_high` | low |\n"})
        found = design_mismatches(root, design)
        assert len(found) == 1 and "row for low/" in found[0], found
    print("layering self-test: a clean tree passes; a wrong-way include, a cycle and a stale design table are caught")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) == 2:
        sys.exit(check(sys.argv[1]))
    if len(sys.argv) == 4 and sys.argv[2] == "--design":
        sys.exit(check(sys.argv[1], sys.argv[3]))
    sys.exit(__doc__)
