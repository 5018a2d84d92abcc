#!/usr/bin/env python3
"""The repository stands alone: no tracked file cites a document that is not in it (a design
document, the project it grew from, or a tracker's issue numbers). Usage: check_standalone.py ROOT"""
import pathlib
import re
import subprocess
import sys

# Built from pieces so that this file does not match itself.
PATTERNS = [re.compile(p, re.I) for p in (r"design" + r"\.md", r"\bthe " + r"seed\b", r"\bissues? #?\d+")]


def tracked_files(root):
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=False)
    if out.returncode != 0:  # not a git checkout (an unpacked tarball): every file under root
        return [p for p in root.rglob("*") if p.is_file() and "build" not in p.parts[len(root.parts):][:1]]
    return [root / name for name in out.stdout.decode().split("\0") if name]


def main():
    root = pathlib.Path(sys.argv[1])
    problems = []
    for path in tracked_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files (fuzz corpora) carry no prose
        for number, line in enumerate(text.splitlines(), 1):
            for pattern in PATTERNS:
                if pattern.search(line):
                    problems.append(f"{path.relative_to(root)}:{number}: cites '{pattern.search(line).group(0)}': {line.strip()[:120]}")
    for problem in problems:
        print(problem)
    print(f"{len(problems)} citation(s) of documents outside the repository")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
