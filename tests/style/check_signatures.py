#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Checks that no C or C++ source of the checkout writes down a documented kernel's parameter list
by hand: manifests/catalogue.json is the one place, and the layers and plugins take the lists
from the header generated from it, <metrale/catalogue_signatures.h> (docs/kernels.md, "Where
parameter lists come from"). Comments stripped, it reports

1. a brace list of parameter types (METRALE_PARAM_* or a name the file sets to one, such as
   `constexpr P kPtr = METRALE_PARAM_PTR`) equal to the types of a kernel of the catalogue;
2. a brace list of string literals equal to the parameter names of a kernel of the catalogue.

Lists of kernels the catalogue does not document (a vendor's own, a test's fixture) are fine.
Before the tree it checks a small generated tree with one violation of each kind and fails unless
exactly those are reported, so a rule that stops working fails too.

Usage: check_signatures.py SOURCE_ROOT. Exit 0 clean, 1 violations (each printed as file:line).
"""

import json
import re
import sys

from self_test import self_test as run_self_test

from check_layering import CATALOGUE, SOURCE_SUFFIXES, line_of, list_files, read, strip_c_comments

ALIAS = re.compile(r"\b(\w+)\s*=\s*METRALE_PARAM_(PTR|U32|I32|U64|I64|F32|F64)\b")
IDENTIFIER_LIST = re.compile(r"\{\s*(\w+(?:\s*,\s*\w+)+)\s*,?\s*\}")
STRING_LIST = re.compile(r'\{\s*("\w+"(?:\s*,\s*"\w+")+)\s*,?\s*\}')


def documented(root):
    """{types tuple: [module/kernel]} and {names tuple: [module/kernel]} of the catalogue."""
    by_types, by_names = {}, {}
    for module in json.loads(read(root, CATALOGUE))["modules"]:
        for kernel in module["kernels"]:
            key = f"{module['name']}/{kernel['name']}"
            by_types.setdefault(tuple(p["type"] for p in kernel["params"]), []).append(key)
            by_names.setdefault(tuple(p["name"] for p in kernel["params"]), []).append(key)
    return by_types, by_names


def type_lists(text):
    """(offset, types) of each brace list whose every element names a parameter type."""
    names = {m.group(1): m.group(2).lower() for m in ALIAS.finditer(text)}
    names.update({f"METRALE_PARAM_{t}": t.lower() for t in ("PTR", "U32", "I32", "U64", "I64", "F32", "F64")})
    for match in IDENTIFIER_LIST.finditer(text):
        elements = [e.strip() for e in match.group(1).split(",")]
        if all(e in names for e in elements):
            yield match.start(), tuple(names[e] for e in elements)


def string_lists(text):
    for match in STRING_LIST.finditer(text):
        yield match.start(), tuple(e.strip().strip('"') for e in match.group(1).split(","))


def kernels_text(kernels):
    return ", ".join(kernels[:3]) + (f" and {len(kernels) - 3} more" if len(kernels) > 3 else "")


def check(root):
    files = list_files(root)
    if CATALOGUE not in files:
        return [f"{CATALOGUE} not found: nothing to check against"]
    by_types, by_names = documented(root)
    problems = []
    for path in files:
        if not path.endswith(SOURCE_SUFFIXES):
            continue
        text = strip_c_comments(read(root, path))
        for offset, types in type_lists(text):
            if types in by_types:
                problems.append(f"{path}:{line_of(text, offset)}: a hand-written parameter type list "
                                f"({', '.join(types)}), the one of {kernels_text(by_types[types])}: take it from "
                                "<metrale/catalogue_signatures.h>")
        for offset, names in string_lists(text):
            if names in by_names:
                problems.append(f"{path}:{line_of(text, offset)}: a hand-written parameter name list "
                                f"({', '.join(names)}), the one of {kernels_text(by_names[names])}: take it from "
                                "<metrale/catalogue_signatures.h>")
    return problems


def self_test():
    """A tree with one violation of each kind, and lists the rules leave alone."""
    catalogue = {"modules": [{"name": "xmod", "kernels": [
        {"name": "xscale", "params": [{"name": "x", "type": "ptr"}, {"name": "n", "type": "u32"},
                                      {"name": "s", "type": "f32"}]}]}]}
    tree = {
        CATALOGUE: json.dumps(catalogue),
        "layers/a.cpp": "using P = metrale_param_type;\n"
                        "constexpr P kPtr = METRALE_PARAM_PTR, kU32 = METRALE_PARAM_U32;\n"
                        "constexpr std::array<P, 3> kSig{kPtr, kU32,\n    METRALE_PARAM_F32};\n"
                        "// {METRALE_PARAM_PTR, METRALE_PARAM_U32, METRALE_PARAM_F32} in a comment is fine\n"
                        "constexpr std::array<P, 2> kOwn{kPtr, kU32};  // a kernel of its own\n",
        "plugins/p/table.c": 'static const char* const kNames[] = {"x", "n", "s"};\n'
                             'static const char* const kOther[] = {"x", "n"};\n',
        "docs/notes.md": "{METRALE_PARAM_PTR, METRALE_PARAM_U32, METRALE_PARAM_F32} in a document is fine\n",
    }
    expected = ["layers/a.cpp:3: a hand-written parameter type list (ptr, u32, f32), the one of xmod/xscale",
                "plugins/p/table.c:1: a hand-written parameter name list (x, n, s), the one of xmod/xscale"]
    return run_self_test(tree, expected, check, "metrale-signatures-")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    problems = self_test() + check(sys.argv[1])
    for problem in problems:
        print(f"FAIL: {problem}")
    if not problems:
        print("catalogue signatures ok: no source writes a documented kernel's parameter types or names by hand")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
