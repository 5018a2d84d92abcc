#!/usr/bin/python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Checks that docs/kernels.md and the kernel catalogue (manifests/catalogue.json) agree.

Usage: catalogue_agreement.py KERNELS_MD CATALOGUE_JSON [MANIFEST.json ...]

- The table of the section "Catalogue" lists exactly the catalogue's kernels, in its order, with
  the same parameter names and types.
- Every typed signature written in the rest of the page (`name(a: ptr, b: u32)`) equals the
  catalogue's entry for that kernel; every untyped one (`name(a, b)`) has its parameter names;
  every row of a kernel table names a catalogued kernel, and a `<mod>_suffix` row whose list is
  untyped matches at least one catalogued `<module>_suffix` kernel.
- Every catalogued kernel is written about outside the table (by its name, or as `<mod>_suffix`).
- Every MANIFEST given (the in-tree ones) lists documented kernels only with the catalogue's
  parameters.

Exit status 0 when all agree, 1 with one line per disagreement.
"""

import json
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def load_catalogue(path):
    doc = json.load(open(path, encoding="utf-8"))
    kernels = []
    for module in doc["modules"]:
        for kernel in module["kernels"]:
            params = [(p["name"], p["type"]) for p in kernel["params"]]
            kernels.append((module["name"], kernel["name"], params))
    return kernels


def split_sections(text):
    """(prose before '## Catalogue', the catalogue section)."""
    marker = re.search(r"^## Catalogue\s*$", text, re.M)
    if not marker:
        return text, ""
    rest = text[marker.end():]
    following = re.search(r"^## ", rest, re.M)
    return text[:marker.start()], rest[: following.start()] if following else rest


def parse_params(text):
    """'a: ptr, b: u32' -> [(a, ptr), (b, u32)]; 'a, b' -> [(a, None), (b, None)]."""
    params = []
    for part in " ".join(text.split()).split(","):
        part = part.strip()
        if not part:
            continue
        name, _, kind = part.partition(":")
        params.append((name.strip(), kind.strip() or None))
    return params


def catalogue_table(section, problems):
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) != 3 or cells[0] in ("module", "---"):
            continue
        if not all(c.startswith("`") and c.endswith("`") for c in cells):
            problems.append(f"docs/kernels.md catalogue: malformed row {line!r}")
            continue
        module, name, params = (c.strip("`") for c in cells)
        rows.append((module, name, parse_params(params)))
    return rows


def check_table(rows, kernels, problems):
    if not rows:
        problems.append("docs/kernels.md has no '## Catalogue' table")
    for i in range(max(len(rows), len(kernels))):
        doc = rows[i] if i < len(rows) else None
        cat = kernels[i] if i < len(kernels) else None
        if doc != cat:
            problems.append(f"docs/kernels.md catalogue row {i + 1} is {doc}, the catalogue has {cat}")
            return


def check_prose(prose, kernels, problems):
    by_name = {name: (module, params) for module, name, params in kernels}
    # Inline code holding a signature: `name(params)`, possibly across a line break.
    for match in re.finditer(r"`(" + IDENT + r")\(([^`()]*)\)`", prose):
        name, params = match.group(1), parse_params(match.group(2))
        typed = any(kind is not None for _, kind in params)
        if name not in by_name:
            if typed:  # an untyped `min(T, E)` is arithmetic, not a signature
                problems.append(f"docs/kernels.md: `{name}(...)` is not in the catalogue")
            continue
        if params == [("...", None)]:
            continue  # "`gelu_mul(...)` (same list)"
        want = by_name[name][1]
        got_names = [p[0] for p in params]
        if typed:
            if params != want:
                problems.append(f"docs/kernels.md: {name} is written {params}, the catalogue has {want}")
        elif got_names != [p[0] for p in want]:
            problems.append(f"docs/kernels.md: {name} takes {got_names}, the catalogue has {[p[0] for p in want]}")
    # "`fp8_gemv`/`fp8_gemm` take `(x, weight, ...)`": untyped lists after named kernels.
    for match in re.finditer(r"((?:`" + IDENT + r"`\s*/?\s*)+)takes? `\(([^`]*)\)`", prose):
        names = re.findall(r"`(" + IDENT + r")`", match.group(1))
        params = [p[0] for p in parse_params(match.group(2))]
        for name in names:
            if name not in by_name:
                problems.append(f"docs/kernels.md: `{name}` takes a list but is not in the catalogue")
            elif params != [p[0] for p in by_name[name][1]]:
                problems.append(f"docs/kernels.md: {name} takes {params}, the catalogue has {[p[0] for p in by_name[name][1]]}")
    check_tables(prose, kernels, by_name, problems)


def check_tables(prose, kernels, by_name, problems):
    modules = {module for module, _, _ in kernels}
    for line in prose.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) < 2 or not re.fullmatch(r"`(<mod>_)?" + IDENT + "`", cells[0]):
            continue
        name = cells[0].strip("`")
        listed = re.fullmatch(r"`\(([^`]*)\)`", cells[1])
        if name.startswith("<mod>_"):
            suffix = name[len("<mod>_"):]
            matches = [by_name[m + "_" + suffix] for m in modules if m + "_" + suffix in by_name]
            if not matches:
                problems.append(f"docs/kernels.md: table row {name} matches no catalogued kernel")
            elif listed:
                names = [p[0] for p in parse_params(listed.group(1))]
                if all(names != [p[0] for p in params] for _, params in matches):
                    problems.append(f"docs/kernels.md: table row {name} takes {names}, which no catalogued kernel does")
        elif re.fullmatch(r"[a-z0-9_]+_[a-z0-9_]+", name) and name not in by_name and name not in modules:
            if not re.fullmatch(r"w\d.*-.*|cpu-.*", name):
                problems.append(f"docs/kernels.md: table row `{name}` is not in the catalogue")


def check_mentioned(prose, kernels, problems):
    for module, name, _ in kernels:
        suffix = name[len(module) + 1:] if name.startswith(module + "_") else None
        if f"`{name}" in prose or name in re.findall(IDENT, prose):
            continue
        if suffix and f"<mod>_{suffix}" in prose:
            continue
        problems.append(f"docs/kernels.md says nothing about {module}/{name} outside the catalogue table")


def check_manifests(paths, kernels, problems):
    documented = {(m, n): p for m, n, p in kernels}
    for path in paths:
        manifest = json.load(open(path, encoding="utf-8"))
        for module in manifest["modules"]:
            for kernel in module["kernels"]:
                want = documented.get((module["name"], kernel["name"]))
                got = [(p["name"], p["type"]) for p in kernel["params"]]
                if want is not None and got != want:
                    problems.append(f"{path}: {module['name']}/{kernel['name']} declares {got}, the catalogue {want}")


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    kernels = load_catalogue(argv[2])
    prose, section = split_sections(open(argv[1], encoding="utf-8").read())
    problems = []
    names = [name for _, name, _ in kernels]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"catalogue: kernel name {name} appears in two modules")
    check_table(catalogue_table(section, problems), kernels, problems)
    check_prose(prose, kernels, problems)
    check_mentioned(prose, kernels, problems)
    check_manifests(argv[3:], kernels, problems)
    for line in problems:
        print("FAIL:", line)
    if not problems:
        print(f"docs/kernels.md and the catalogue agree on {len(kernels)} kernels")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
