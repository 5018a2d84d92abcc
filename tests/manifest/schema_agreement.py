#!/usr/bin/python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Checks that manifests/manifest.schema.json and the runtime's validator agree.

Usage: schema_agreement.py MANIFEST_VERDICT SCHEMA [MUST_ACCEPT.json ...]

Generates a corpus of manifests (two good ones, every value of them replaced by values of every
JSON type, every key removed, unknown keys added under format 1.0 and 1.1, edge cases of every
pattern and range and of the rules between a lever's keys, malformed texts) into a temporary directory, asks MANIFEST_VERDICT (the C++
validator) for its verdict on each, validates each with jsonschema, and fails on any document
where one accepts and the other does not. Documents that break a rule only the runtime checks
(docs/manifest.md, "Rules only the runtime checks") are excluded from the comparison, each with
its reason, and must be rejected by the runtime. Files given after SCHEMA (the in-tree manifests)
must be accepted by both.

Exit status: 0 agreement, 1 disagreement, 77 (skip) when jsonschema is not installed.
"""

import copy
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    from jsonschema import Draft202012Validator
except ImportError as error:  # the Debian package is python3-jsonschema (4.x)
    print(f"SKIP: python3-jsonschema with draft 2020-12 support is not installed ({error})")
    sys.exit(77)


MINIMAL = {
    "format_version": "1.0",
    "backend": "cpu",
    "library": "libmetrale_cpu.so",
    "abi_version": 1,
    "priority": 10,
    "modules": [],
}

FULL = {
    "format_version": "1.0",
    "backend": "cuda",
    "library": "plugins/libmetrale_cuda.so",
    "abi_version": 1,
    "priority": 100,
    "description": "CUDA backend",
    "library_checksum": "xxh3-64:0123456789abcdef",
    "targets": ["sm_80", "sm_90"],
    "target_tiers": [{"target": "t-base", "features": ["sse2"]}, {"target": "t-high"}],
    "levers": [
        {"name": "METRALE_X_DRIVER", "option": "driver", "type": "path", "default": "libx.so",
         "meaning": "Driver library."},
        {"name": "METRALE_X_DEVICE", "option": "device_index", "type": "u32", "default": "0",
         "meaning": "Device index.", "path": False},
        {"name": "METRALE_X_TIER", "option": "tier", "type": "choice", "default": "auto",
         "meaning": "Tier.", "choices": ["auto", "low"]},
    ],
    "modules": [
        {
            "name": "w4a16",
            "source": "w4a16.cu",
            "kernels": [
                {
                    "name": "w4a16_gemm_t",
                    "params": [{"name": "x", "type": "ptr"}, {"name": "m", "type": "u32"}],
                    "min_target": "sm_80",
                    "cpu_features": ["avx2"],
                    "weight_layout": "w4a16-nk-g128",
                },
                {"name": "w4a16_gemm_t_p3", "params": []},
            ],
        },
        {"name": "act", "kernels": [{"name": "silu_mul", "params": [{"name": "g", "type": "f32"}]}]},
    ],
}

# One value of every JSON type, plus values that sit on the edge of some rule.
WRONG_VALUES = [
    None, True, False, 0, 1, -1, 1.5, 3.0, 2**64, 1e30,
    "", "x", "cpu", "cpu\n", "1.0", "ptr", "_id", "../x", "/abs",
    [], ["x"], [1], [""], {}, {"name": "x"},
]


def pointer_token(key):
    return str(key).replace("~", "~0").replace("/", "~1")


def walk(value, pointer=""):
    """Yields (pointer, parent, key) for every value below `value`."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, child in items:
        child_pointer = f"{pointer}/{pointer_token(key)}"
        yield child_pointer, value, key
        yield from walk(child, child_pointer)


def at(doc, pointer):
    """(parent, key) of the value at pointer in doc."""
    parts = pointer.split("/")[1:]
    node = doc
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last = parts[-1]
    return node, (int(last) if isinstance(node, list) else last)


def replaced(doc, pointer, value):
    doc = copy.deepcopy(doc)
    parent, key = at(doc, pointer)
    parent[key] = value
    return doc


def removed(doc, pointer):
    doc = copy.deepcopy(doc)
    parent, key = at(doc, pointer)
    del parent[key]
    return doc


def objects(doc):
    """Pointers of every object in doc, the root included."""
    found = [""] if isinstance(doc, dict) else []
    for pointer, parent, key in walk(doc):
        if isinstance(parent[key], dict):
            found.append(pointer)
    return found


def with_key(doc, pointer, key, value):
    doc = copy.deepcopy(doc)
    node = doc
    if pointer:
        parent, k = at(doc, pointer)
        node = parent[k]
    node[key] = value
    return doc


def encode(doc):
    return json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8", "surrogatepass")


def build_corpus():
    """List of (name, bytes)."""
    corpus = []

    def add(name, doc):
        corpus.append((name, doc if isinstance(doc, bytes) else encode(doc)))

    for base_name, base in (("minimal", MINIMAL), ("full", FULL)):
        add(base_name, base)
        for pointer, _, _ in list(walk(base)):
            add(f"{base_name} remove {pointer}", removed(base, pointer))
            for i, value in enumerate(WRONG_VALUES):
                add(f"{base_name} {pointer} = #{i} {value!r}", replaced(base, pointer, value))
        for version in ("1.0", "1.1", "1.25"):
            versioned = replaced(base, "/format_version", version)
            add(f"{base_name} version {version}", versioned)
            for pointer in objects(versioned):
                for key in ("extra", "priorty", "nam"):
                    add(f"{base_name} v{version} {pointer} + {key}",
                        with_key(versioned, pointer, key, {"any": [1, None]}))

    for version in ("1.0", "1.1", "1.10", "1.01", "01.0", "2.0", "0.9", "1", "1.", ".0", "",
                    "1.0\n", " 1.0", "1.0.0", "v1.0", "-1.0", "1.-1", "\u0661.0",
                    "99999999999999999999.0", "1.99999999999999999999"):
        add(f"format_version {version!r}", replaced(MINIMAL, "/format_version", version))

    for name in ("c", "my-vendor_2", "a" + "z" * 31, "a" + "z" * 32, "CPU", "9cpu", "-cpu",
                 "cpu\n", "cpu ", "cpü", "cpu.x", "_cpu"):
        add(f"backend {name!r}", replaced(MINIMAL, "/backend", name))

    for library in ("l.so", "./l.so", "sub/l.so", "sub//l.so", "..l.so", "l..so", "sub/..l",
                    "../l.so", "..", "sub/..", "sub/../l.so", "sub/../../l.so", "/abs/l.so",
                    "/abs/../l.so", "//x", "sub/\n../l.so", "..\n", "\n/../l.so", ".", "sub/"):
        add(f"library {library!r}", replaced(MINIMAL, "/library", library))

    for source in ("w.cu", "sub/w.cu", "/abs.cu", "../w.cu", "sub/../w.cu", "..w.cu", "..",
                   "a\n/../w.cu", ".", "sub/", ""):
        add(f"source {source!r}", replaced(FULL, "/modules/0/source", source))

    for checksum in ("xxh3-64:0123456789abcdef", "xxh3-64:0123456789ABCDEF", "xxh3-64:0123",
                     "xxh3-64:0123456789abcdef0", "xxh3-64:0123456789abcdef\n",
                     "xxh3-64:０123456789abcdef", "sha256:0123456789abcdef", ""):
        add(f"checksum {checksum!r}", replaced(MINIMAL, "/library_checksum", checksum))

    for ident in ("_", "_9", "A_b", "1a", "a-b", "a b", "a\n", "été", "a.b", "ａ"):
        add(f"module name {ident!r}", replaced(FULL, "/modules/1/name", ident))
        add(f"kernel name {ident!r}", replaced(FULL, "/modules/1/kernels/0/name", ident))
        add(f"param name {ident!r}", replaced(FULL, "/modules/1/kernels/0/params/0/name", ident))

    for name in ("METRALE_A", "METRALE_A_1", "METRALE_", "METRALE_a", "METRALEX", "metrale_a", "X_A",
                 "METRALE_A\n", "METRALE_A-B", "METRALE__", "METRALE_É"):
        add(f"lever name {name!r}", replaced(FULL, "/levers/0/name", name))
    for option in ("driver", "_x", "device_index", "Device_Index", "1x", "a-b", "", "a b"):
        add(f"lever option {option!r}", replaced(FULL, "/levers/0/option", option))
        add(f"u32 lever option {option!r}", replaced(FULL, "/levers/1/option", option))
    for ltype in ("presence", "flag", "u32", "string", "choice", "path", "path_list", "glob_list",
                  "kernel_map", "U32", "bool", ""):
        add(f"lever type {ltype!r}", replaced(FULL, "/levers/0/type", ltype))
        add(f"device lever type {ltype!r}", replaced(FULL, "/levers/1/type", ltype))
        add(f"choice lever type {ltype!r}", replaced(FULL, "/levers/2/type", ltype))
    for choices in ([], ["a"], ["a", "a"], ["a", ""], ["a", 1], "a", [["a"]]):
        add(f"lever choices {choices!r}", replaced(FULL, "/levers/2/choices", choices))
        add(f"choices on a path lever {choices!r}", with_key(FULL, "/levers/0", "choices", choices))

    for ptype in ("ptr", "u32", "i32", "u64", "i64", "f32", "f64", "f16", "PTR", "ptr ", "u8"):
        add(f"param type {ptype!r}", replaced(FULL, "/modules/1/kernels/0/params/0/type", ptype))

    for number in (-1001, -1000, 0, 1000, 1001, 1000.0, 999.5, -0.0, 2**63, -(2**63) - 1, 2**64,
                   1e300, -1e300):
        add(f"priority {number!r}", replaced(MINIMAL, "/priority", number))
    for number in (0, 1, 1.0, 2, 4294967295, 4294967296, 4294967295.0, -1, 2**64, 0.5):
        add(f"abi_version {number!r}", replaced(MINIMAL, "/abi_version", number))

    minimal_text = encode(MINIMAL)
    for name, text in (
            ("empty file", b""),
            ("whitespace", b" \n\t"),
            ("truncated", minimal_text[:-3]),
            ("trailing comma", minimal_text[:-2] + b",}"),
            ("two documents", minimal_text + minimal_text),
            ("top-level array", b"[]"),
            ("top-level string", b'"x"'),
            ("comment", b"// c\n" + minimal_text),
            ("utf-8 bom", b"\xef\xbb\xbf" + minimal_text),
            ("invalid utf-8", minimal_text.replace(b'"cpu"', b'"cp\xff"')),
            ("NaN literal", minimal_text.replace(b"10", b"NaN")),
            ("Infinity literal", minimal_text.replace(b"10", b"Infinity")),
            ("single quotes", minimal_text.replace(b'"cpu"', b"'cpu'")),
            ("exponent priority", minimal_text.replace(b"10", b"1e1")),
            ("1e400 priority", minimal_text.replace(b"10", b"1e400")),
            # Rules only the runtime checks (see runtime_only_rule below):
            ("duplicate json key", minimal_text.replace(b'"backend"', b'"backend": "x", "backend"')),
            ("1e400 under newer minor",
             encode(with_key(replaced(MINIMAL, "/format_version", "1.1"), "", "x", 0))
             .replace(b'"x": 0', b'"x": 1e400')),
            ("lone surrogate escape",
             encode(replaced(MINIMAL, "/description", "SURROGATE")).replace(b"SURROGATE", b"\\ud800")),
            ("lone surrogate bytes", encode(replaced(MINIMAL, "/description", "\ud800"))),
    ):
        add(name, text)

    dup = copy.deepcopy(FULL)
    dup["modules"][1]["name"] = "w4a16"
    add("duplicate module name", dup)
    dup = copy.deepcopy(FULL)
    dup["modules"][0]["kernels"][1]["name"] = "w4a16_gemm_t"
    add("duplicate kernel name", dup)
    dup = copy.deepcopy(FULL)
    dup["modules"][0]["kernels"][0]["params"][1]["name"] = "x"
    add("duplicate param name", dup)
    same = copy.deepcopy(FULL)
    same["modules"][1]["kernels"][0]["name"] = "w4a16_gemm_t"
    add("same kernel name in two modules", same)
    dup = copy.deepcopy(FULL)
    dup["levers"][1]["name"] = "METRALE_X_DRIVER"
    add("duplicate lever name", dup)
    dup = copy.deepcopy(FULL)
    dup["levers"][2]["option"] = "driver"
    add("duplicate lever option", dup)
    dup = copy.deepcopy(FULL)
    dup["target_tiers"][1]["target"] = "t-base"
    add("duplicate tier target", dup)
    return corpus


class NotJson(ValueError):
    pass


def strict_load(data):
    """Parses like RFC 8259, not like Python's lenient json: NaN and Infinity are not JSON."""
    def constant(name):
        raise NotJson(f"{name} is not JSON")
    return json.loads(data, parse_constant=constant)


def runtime_only_rule(data):
    """The runtime-only rule this document breaks, or None (docs/manifest.md lists them)."""
    duplicates = []

    def pairs(items):
        keys = [k for k, _ in items]
        if len(keys) != len(set(keys)):
            duplicates.append(keys)
        return dict(items)

    try:
        doc = json.loads(data, object_pairs_hook=pairs,
                         parse_constant=lambda name: (_ for _ in ()).throw(NotJson(name)))
    except ValueError:
        return None
    if duplicates:
        return "duplicate key in a JSON object (Python keeps the last value silently)"

    def values(v):
        yield v
        if isinstance(v, dict):
            for c in v.values():
                yield from values(c)
        elif isinstance(v, list):
            for c in v:
                yield from values(c)

    for v in values(doc):
        if isinstance(v, float) and math.isinf(v):
            return "number beyond double range (Python reads it as infinity)"
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return "string that is not valid Unicode (a lone surrogate escape)"

    def unique(items, what):
        names = [i.get("name") for i in items if isinstance(i, dict) and isinstance(i.get("name"), str)]
        return f"duplicate {what} name" if len(names) != len(set(names)) else None

    if isinstance(doc, dict):
        for key, field, what in (("levers", "name", "lever name"), ("levers", "option", "lever option"),
                                 ("target_tiers", "target", "tier target")):
            items = doc.get(key)
            if isinstance(items, list):
                values = [i.get(field) for i in items if isinstance(i, dict) and isinstance(i.get(field), str)]
                if len(values) != len(set(values)):
                    return f"duplicate {what}"

    if isinstance(doc, dict) and isinstance(doc.get("modules"), list):
        modules = doc["modules"]
        reason = unique(modules, "module")
        for module in modules:
            if reason:
                break
            if isinstance(module, dict) and isinstance(module.get("kernels"), list):
                reason = unique(module["kernels"], "kernel")
                for kernel in module["kernels"]:
                    if reason:
                        break
                    if isinstance(kernel, dict) and isinstance(kernel.get("params"), list):
                        reason = unique(kernel["params"], "parameter")
        return reason
    return None


def schema_verdict(validator, data):
    try:
        doc = strict_load(data)
    except (ValueError, UnicodeDecodeError) as error:
        return "reject", f"not JSON: {error}"
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/" + "/".join(pointer_token(p) for p in first.absolute_path)
        return "reject", f"{where}: {first.message}"
    return "accept", ""


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    verdict_tool, schema_path, must_accept = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(schema_path, encoding="utf-8") as f:
        schema = json.load(f)
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)

    corpus = build_corpus()
    with tempfile.TemporaryDirectory(prefix="metrale-schema-") as tmp:
        files = []
        for i, (_, data) in enumerate(corpus):
            path = os.path.join(tmp, f"m{i:05d}.json")
            with open(path, "wb") as f:
                f.write(data)
            files.append(path)
        files += [os.path.abspath(p) for p in must_accept]
        out = subprocess.run([verdict_tool, *files], capture_output=True, check=True).stdout
    runtime = {}
    for line in out.decode("utf-8").splitlines():
        verdict, path, problems = line.split("\t", 2)
        runtime[path] = (verdict, problems)
    if len(runtime) != len(files):
        print(f"FAIL: the verdict tool answered for {len(runtime)} of {len(files)} files")
        return 1

    failures, excluded, counts = [], [], {"accept": 0, "reject": 0}
    named = [(name, data) for name, data in corpus]
    for path in files[len(corpus):]:
        with open(path, "rb") as f:
            named.append((f"in-tree {path}", f.read()))
    for (name, data), path in zip(named, files):
        cpp_verdict, cpp_problems = runtime[path]
        cpp_accepts = cpp_verdict == "accept"
        schema_says, schema_problem = schema_verdict(validator, data)
        rule = runtime_only_rule(data)
        if rule:
            excluded.append((name, rule))
            if cpp_accepts:
                failures.append(f"{name}: breaks a runtime-only rule ({rule}) but the runtime "
                                f"accepted it")
            continue
        if name.startswith("in-tree") and not (cpp_accepts and schema_says == "accept"):
            failures.append(f"{name}: an in-tree manifest must be accepted by both; runtime: "
                            f"{cpp_verdict} {cpp_problems}; schema: {schema_says} {schema_problem}")
            continue
        if cpp_accepts != (schema_says == "accept"):
            failures.append(f"{name}: runtime {cpp_verdict} [{cpp_problems}] but schema "
                            f"{schema_says} [{schema_problem}]")
            continue
        counts["accept" if cpp_accepts else "reject"] += 1

    for name, rule in excluded:
        print(f"excluded (runtime-only rule: {rule}): {name}")
    print(f"{len(named)} documents: {counts['accept']} accepted by both, "
          f"{counts['reject']} rejected by both, {len(excluded)} excluded")
    # A corpus that degenerated (say, every document rejected for one reason) proves nothing.
    for base in ("minimal", "full", "minimal version 1.1", "full version 1.25"):
        if base in dict(corpus) and runtime[files[[n for n, _ in corpus].index(base)]][0] != "accept":
            failures.append(f"{base}: a good manifest was not accepted")
    if counts["accept"] < 100 or counts["reject"] < 500 or len(excluded) < 5:
        failures.append(f"corpus too weak: {counts}, {len(excluded)} excluded")
    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
