#!/usr/bin/python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""`metrale conformance` and `metrale check-manifest` on the vendor example and the skeleton.

Usage: certify_examples.py METRALE VENDOR_JSON VENDOR_SO SKELETON_JSON SKELETON_SO

Each example, as shipped, passes `metrale conformance` (exit 0) and `metrale check-manifest`.
Copies of its manifest, written into a temporary directory, that rename a module, misspell a
kernel, drop a parameter or retype one must each fail conformance (exit 1) with the problem named
by its case, in the text and in the JSON; check-manifest, which loads nothing, must report the
same problem for each documented kernel (docs/kernels.md): for the skeleton's own kernel, nothing
but loading the plugin can tell, and check-manifest says the manifest is fine.
"""

import copy
import json
import os
import subprocess
import sys
import tempfile

FAILURES = []


def check(condition, message):
    if not condition:
        FAILURES.append(message)


def run(metrale, args, manifest):
    env = {k: v for k, v in os.environ.items() if not k.startswith("METRALE_")}
    env["METRALE_MANIFESTS"] = manifest
    env["METRALE_LOG"] = "error"
    done = subprocess.run([metrale] + args, env=env, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def write(directory, name, manifest):
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as out:
        json.dump(manifest, out, indent=1)
    return path


def kernel(manifest, module, name):
    for m in manifest["modules"]:
        if m["name"] == module:
            for k in m["kernels"]:
                if k["name"] == name:
                    return m, k
    raise KeyError(f"{module}/{name}")


def breakages(example):
    """(label, edit(manifest), failing case names, words or None) per breakage: `words` is what
    check-manifest must print and what the first case of `cases` must say too."""
    if example == "vendor":
        def rename(m): kernel(m, "act", "silu_mul")[0]["name"] = "activation"
        def misspell(m): kernel(m, "w4a16", "w4a16_gemv")[1]["name"] = "w4a16_gemvv"
        def drop(m): kernel(m, "w4a16", "w4a16_gemm_t")[1]["params"].pop()
        def retype(m): kernel(m, "act", "silu_mul")[1]["params"][3]["type"] = "i32"
        return [
            ("renamed module", rename,
             ["manifest/catalogue/activation/silu_mul", "manifest/catalogue/activation/gelu_mul",
              "manifest/agreement/activation/silu_mul", "manifest/agreement/act/silu_mul"],
             "silu_mul is documented in module act, not in module activation"),
            ("misspelt kernel", misspell,
             ["manifest/catalogue/w4a16/w4a16_gemvv", "manifest/agreement/w4a16/w4a16_gemvv",
              "manifest/agreement/w4a16/w4a16_gemv"],
             "w4a16_gemvv is not one of its kernels (did you mean w4a16_gemv?)"),
            ("dropped parameter", drop,
             ["manifest/catalogue/w4a16/w4a16_gemm_t", "manifest/agreement/w4a16/w4a16_gemm_t"],
             "parameter 7 (k: u32) is missing"),
            ("retyped parameter", retype,
             ["manifest/catalogue/act/silu_mul", "manifest/agreement/act/silu_mul"],
             "parameter 4 is i: i32, documented i: u32"),
        ]
    def rename(m): kernel(m, "skeleton", "fill_u32")[0]["name"] = "skeletn"
    def misspell(m): kernel(m, "skeleton", "fill_u32")[1]["name"] = "fill_u23"
    def drop(m): kernel(m, "skeleton", "fill_u32")[1]["params"].pop()
    def retype(m): kernel(m, "skeleton", "fill_u32")[1]["params"][1]["type"] = "f32"
    return [
        ("renamed module", rename, ["manifest/agreement/skeletn/fill_u32", "manifest/agreement/skeleton/fill_u32"], None),
        ("misspelt kernel", misspell, ["manifest/agreement/skeleton/fill_u23", "manifest/agreement/skeleton/fill_u32"], None),
        ("dropped parameter", drop, ["manifest/agreement/skeleton/fill_u32"], None),
        ("retyped parameter", retype, ["manifest/agreement/skeleton/fill_u32"], None),
    ]


def certify_pristine(metrale, example, path):
    code, out, err = run(metrale, ["conformance", "--quiet"], path)
    check(code == 0, f"{example}: conformance exited {code}:\n{out}{err}")
    check(f"backend '{example}' " in out.splitlines()[-1] if out else False, f"{example}: no verdict:\n{out}")
    check("FAIL " not in out, f"{example}: a case failed:\n{out}")
    check("coverage of the layer paths:" in out and "dense/decode" in out, f"{example}: no coverage table:\n{out}")
    code, out, err = run(metrale, ["check-manifest", path], path)
    check(code == 0, f"{example}: check-manifest exited {code}:\n{out}{err}")


def certify_broken(metrale, example, directory, pristine):
    for label, edit, cases, words in breakages(example):
        manifest = copy.deepcopy(pristine)
        edit(manifest)
        path = write(directory, f"{example}-{label.replace(' ', '-')}.json", manifest)
        what = f"{example}, {label}"
        # A narrow case selection keeps it fast; the manifest checks and the paths always run.
        code, out, err = run(metrale, ["conformance", "--quiet", "--json", "--cases", "dense/silu_h256_i512/m1"], path)
        check(code == 1, f"{what}: conformance exited {code}, expected 1:\n{err}")
        try:
            report = json.loads(out)
        except json.JSONDecodeError:
            check(False, f"{what}: no JSON:\n{out}{err}")
            continue
        failed = {c["name"]: c["detail"] for c in report["cases"] if c["outcome"] == "FAIL"}
        for case in cases:
            check(case in failed, f"{what}: no failing case {case}; failed: {sorted(failed)}")
        check(report["certified"] is False, f"{what}: certified")
        check("FAILED" in report["verdict"], f"{what}: verdict {report['verdict']}")
        code, text, _ = run(metrale, ["conformance", "--quiet", "--cases", "dense/silu_h256_i512/m1"], path)
        for case in cases:
            check(f"FAIL {case}  " in text, f"{what}: text output does not name {case}:\n{text}")
        code, out, err = run(metrale, ["check-manifest", path], path)
        if words is None:
            check(code == 0, f"{what}: check-manifest cannot know the plugin, yet exited {code}: {out}")
        else:
            check(code == 1, f"{what}: check-manifest exited {code}, expected 1: {out}")
            check(words in out, f"{what}: check-manifest does not say {words!r}:\n{out}")
            check(words in failed.get(cases[0], ""), f"{what}: {cases[0]} does not say {words!r} as check-manifest does")


def main(argv):
    if len(argv) != 6:
        print(__doc__)
        return 2
    absolute = [os.path.abspath(a) for a in argv[1:]]  # Meson passes build targets relative to the build dir
    metrale, examples = absolute[0], {"vendor": (absolute[1], absolute[2]), "skeleton": (absolute[3], absolute[4])}
    with tempfile.TemporaryDirectory(prefix="metrale-certify-") as directory:
        for example, (source, library) in examples.items():
            with open(source, encoding="utf-8") as f:
                pristine = json.load(f)
            pristine["library"] = library  # the copies live elsewhere: name the built plugin
            path = write(directory, f"{example}.json", pristine)
            certify_pristine(metrale, example, path)
            certify_broken(metrale, example, directory, pristine)
    for line in FAILURES:
        print("FAIL:", line)
    if not FAILURES:
        print("the vendor example and the skeleton pass; each broken copy fails with its problem named")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
