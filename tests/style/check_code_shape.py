#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Checks the code shape docs/testing.md ("Code shape") asks for, on the C, C++ and CUDA sources of
the checkout (runtime/ layers/ plugins/ cli/ tests/ fuzz/ kernel_src/ docs/examples/):

1. no function is longer than MAX_FUNCTION_LINES lines, unless the comment lines directly above it
   carry the marker `code-shape: data table` (a function that is mostly a table: a switch of names,
   an initialiser list). A doctest TEST_CASE (or TEST_CASE_FIXTURE) counts as a function.
2. no file is longer than MAX_FILE_LINES lines, unless one of its first MARKER_HEAD_LINES lines
   carries `code-shape: single concept: <reason>` with a reason.

Functions and their extents come from universal-ctags (`--output-format=json --fields=+ne`).
Before the tree it checks a small generated tree with one violation of each kind and fails unless
exactly those are reported, so a rule that stops working fails too.

Usage: check_code_shape.py SOURCE_ROOT. Exit 0 clean, 1 violations, 77 (skip) without
universal-ctags.
"""

import json
import os
import re
import shutil
import subprocess
import sys

from self_test import self_test as run_self_test

from check_layering import list_files

MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 600
MARKER_HEAD_LINES = 20
AREAS = ("runtime/", "layers/", "tools/", "plugins/", "cli/", "python/", "tests/", "fuzz/", "kernel_src/", "docs/examples/")
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".h", ".hpp", ".cu", ".cuh")
TABLE_MARKER = "code-shape: data table"
FILE_MARKER = re.compile(r"code-shape: single concept: *\S")


def sources(root):
    return [p for p in list_files(root) if p.startswith(AREAS) and p.endswith(SOURCE_SUFFIXES)]


def ctags_functions(root, files):
    """(path, line, end, name) of every function definition ctags finds in files."""
    args = ["ctags", "--output-format=json", "--fields=+ne", "--kinds-C=f", "--kinds-C++=f",
            "--kinds-CUDA=f", "--langmap=CUDA:+.cuh", "-D", "TEST_CASE(title)=void TEST_CASE()",
            "-D", "TEST_CASE_FIXTURE(fixture,title)=void TEST_CASE_FIXTURE()",
            "-f", "-", "-L", "-"]
    out = subprocess.run(args, cwd=root, input="\n".join(files), capture_output=True, text=True, check=True)
    functions = []
    for row in out.stdout.splitlines():
        tag = json.loads(row)
        if tag.get("_type") != "tag" or tag.get("kind") != "function" or "end" not in tag:
            continue
        name = tag["name"]
        if name in ("TEST_CASE", "TEST_CASE_FIXTURE"):
            title = re.search(r'TEST_CASE(?:_FIXTURE)?\((?:\s*\w+\s*,)?\s*"((?:[^"\\]|\\.)*)"', tag.get("pattern", ""))
            name = f'{name}("{title.group(1) if title else "?"}")'
        elif tag.get("scopeKind") in ("class", "struct"):
            name = f'{tag["scope"].split("::")[-1]}::{name}'
        functions.append((tag["path"], tag["line"], tag["end"], name))
    return functions


def marked_as_table(lines, line):
    """Whether the comment lines directly above 1-based `line` (template headers skipped) carry the marker."""
    i = line - 2
    while i >= 0 and lines[i].lstrip().startswith("template"):
        i -= 1
    while i >= 0 and lines[i].lstrip().startswith(("//", "/*", "*")):
        if TABLE_MARKER in lines[i]:
            return True
        i -= 1
    return False


def check(root):
    files = sources(root)
    text = {}
    for path in files:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text[path] = f.read().splitlines()
    problems = []
    for path, line, end, name in sorted(ctags_functions(root, files)):
        length = end - line + 1
        if length <= MAX_FUNCTION_LINES or marked_as_table(text[path], line):
            continue
        problems.append(f"{path}:{line}: function {name} is {length} lines (at most {MAX_FUNCTION_LINES}): "
                        f"split it by concept, or mark a data table with '// {TABLE_MARKER}'")
    for path in files:
        lines = text[path]
        if len(lines) > MAX_FILE_LINES and not any(FILE_MARKER.search(x) for x in lines[:MARKER_HEAD_LINES]):
            problems.append(f"{path}: {len(lines)} lines (at most {MAX_FILE_LINES}): split it by concept, "
                            "or say why it is one with '// code-shape: single concept: <reason>'")
    return problems


def self_test():
    """A tree with one violation of each kind and one exemption of each kind."""
    body = lambda n: "".join(f"  x += {i};\n" for i in range(n))  # noqa: E731
    tree = {
        "runtime/src/long.cpp": "namespace m {\nint long_one(int x) {\n" + body(80) + "  return x;\n}\n}\n",
        "layers/ok.hpp": "struct S {\n  int fits(int x) {\n" + body(77) + "    return x;\n  }\n};\n",
        "plugins/p/table.cpp": "// Names of the codes.\n// code-shape: data table\nconst char* name(int c) {\n"
                               "  switch (c) {\n" + "".join(f"  case {i}: return \"{i}\";\n" for i in range(90))
                               + "  }\n  return \"?\";\n}\n",
        "tests/t/test_x.cpp": 'TEST_CASE("a long case") {\n  int x = 0;\n' + body(80) + "}\n"
                              'TEST_CASE_FIXTURE(F, "a long fixture case") {\n' + body(81) + "}\n",
        "kernel_src/k.cu": "__global__ void kern(int x) {\n" + body(85) + "}\n",
        "cli/big.cpp": "int a;\n" * 601,
        "cli/one.cpp": "// code-shape: single concept: one table\n" + "int a;\n" * 601,
        "docs/notes.cpp": "int a;\n" * 700,
    }
    expected = ["runtime/src/long.cpp:2: function long_one is 83 lines",
                "tests/t/test_x.cpp:1: function TEST_CASE(\"a long case\") is 83 lines",
                "tests/t/test_x.cpp:84: function TEST_CASE_FIXTURE(\"a long fixture case\") is 83 lines",
                "kernel_src/k.cu:1: function kern is 87 lines",
                "cli/big.cpp: 601 lines"]
    return run_self_test(tree, expected, check, "metrale-code-shape-")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if shutil.which("ctags") is None or "Universal Ctags" not in subprocess.run(
            ["ctags", "--version"], capture_output=True, text=True).stdout:
        print("SKIP: universal-ctags is not installed (the Debian package universal-ctags)")
        return 77
    problems = self_test() + check(sys.argv[1])
    for problem in problems:
        print(f"FAIL: {problem}")
    if not problems:
        print(f"code shape ok: no function over {MAX_FUNCTION_LINES} lines, no file over {MAX_FILE_LINES} lines "
              "outside the marked ones")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
