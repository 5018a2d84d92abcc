#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Checks the layering docs/architecture.md promises ("Layering"), on the files of the checkout:

1. nothing under runtime/ includes a header of layers/ or plugins/;
2. nothing under plugins/ includes a header of runtime/ outside the ABI directory runtime/abi/;
3. inside layers/, each concern includes only the ones below it (LAYER_DEPENDS): core/ nothing
   of the layers, io/ and linear/ core/, ffn/ core, io, linear and reference, reference/ core and io, architectures/ core and io, state/ core, attention/ and deltanet/ core, io, linear, architectures and state,
   decoder/ all but engine/ and the top, engine/ all but the top; the
   layers' own files include nothing of tools/ (conformance, bench) or cli/;
4. nothing under cli/ includes a header of plugins/ (the CLI reaches a plugin through the registry
   and the ABI's extension headers);
5. runtime/ code (its extension headers in runtime/abi/ aside), comments stripped, names no backend and no lever it does not declare: backend
   names are the "backend" of every manifest under manifests/ and plugins/ (plus the technology
   words in EXTRA_BACKEND_WORDS), lever names those declared in a manifest's "levers" and in
   layers/core/levers.cpp;
6. the same runtime/ code names no kernel module the layers look kernels up in (a kernel family
   such as w4a16): the modules of manifests/catalogue.json. What a layer pins about its lookups
   reaches the runtime as opaque annotations, never as a family the runtime knows;
7. the generic quantized-linear code (layers/linear/linear_plan.*, layers/linear/projection_set.*)
   and the blocks (layers/ffn/) name no W4A16 family or format: every format goes through the
   LinearPlan interface, W4A16 as one implementation (layers/linear/projection.*);
8. an installed layers header (install_headers in layers/meson.build) includes no header of the
   tree that is not installed too: the public API reaches none of the layers' internals (the
   runtime's public headers, <metrale/...> from runtime/include and runtime/abi, are installed).

Before the tree it checks a small generated tree with one violation of each kind and fails unless
every one is reported, so a rule that stops working fails too.

Usage: check_layering.py SOURCE_ROOT. Exit 0 clean, 1 violations (each printed as file:line).
"""

import json
import os
import re
import subprocess
import sys

from self_test import self_test as run_self_test

EXTRA_BACKEND_WORDS = ["CUDA", "NVRTC", "libcuda"]
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".h", ".hpp", ".cuh", ".cu")
CATALOGUE = "manifests/catalogue.json"
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.M)


def list_files(root):
    """Paths relative to root: git's tracked and untracked-but-not-ignored files, else a walk."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                             capture_output=True, check=True).stdout.decode()
        return sorted(p for p in out.split("\0") if p and os.path.isfile(os.path.join(root, p)))
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return sorted(files)


def strip_c_comments(text):
    """The text with C/C++ comments blanked (newlines kept), string and character literals intact."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_hash_comments(text):
    """meson.build: '#' to the end of the line, outside '...' strings."""
    lines = []
    for line in text.split("\n"):
        quoted = False
        for k, c in enumerate(line):
            if c == "'":
                quoted = not quoted
            elif c == "#" and not quoted:
                line = line[:k]
                break
        lines.append(line)
    return "\n".join(lines)


def code_of(path, text):
    if path.endswith(SOURCE_SUFFIXES):
        return strip_c_comments(text)
    if os.path.basename(path) in ("meson.build", "meson_options.txt"):
        return strip_hash_comments(text)
    return text


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        return f.read()


def line_of(text, index):
    return text.count("\n", 0, index) + 1


def resolves_within(root, files, path, include, own_dirs):
    """Whether `include` names a file of `own_dirs` (relative to the including file, or to one of them)."""
    here = os.path.dirname(path)
    for base in [here] + own_dirs:
        candidate = os.path.normpath(os.path.join(base, include))
        if candidate in files and any(candidate.startswith(d + "/") for d in own_dirs + [here]):
            return True
    return False


def include_target(files, path, include, areas):
    """The file of one of `areas` that `include` could name: by a relative path, or by its last
    path components (an include directory); None when it names none."""
    relative = os.path.normpath(os.path.join(os.path.dirname(path), include))
    if relative in files and relative.startswith(tuple(a + "/" for a in areas)):
        return relative
    suffix = "/" + include.lstrip("./")
    for f in files:
        if f.startswith(tuple(a + "/" for a in areas)) and ("/" + f).endswith(suffix):
            return f
    return None


# Which concerns of layers/ each may include ("" is the top: embed.hpp and the composition).
LAYER_DEPENDS = {
    "core": {"core"},
    "io": {"core", "io"},
    "linear": {"core", "linear"},
    "ffn": {"core", "io", "linear", "reference", "ffn"},
    "reference": {"core", "io", "reference"},
    "architectures": {"core", "io", "architectures"},
    "state": {"core", "state"},
    "attention": {"core", "io", "linear", "architectures", "state", "attention"},
    "deltanet": {"core", "io", "linear", "architectures", "state", "deltanet"},
    "decoder": {"core", "io", "linear", "ffn", "reference", "architectures", "state", "attention", "deltanet", "decoder"},
    "engine": {"core", "io", "linear", "ffn", "reference", "architectures", "state", "attention", "deltanet", "decoder", "engine"},
    "": {"core", "io", "linear", "ffn", "reference", "architectures", "state", "attention", "deltanet", "decoder", "engine", ""},
}


def layer_concern(path):
    """The concern of a file under layers/ ("" for the top), or None outside layers/."""
    parts = path.split("/")
    if parts[0] != "layers":
        return None
    return parts[1] if len(parts) > 2 else ""


def check_layer_includes(root, files, path, text):
    problems = []
    concern = layer_concern(path)
    for match in INCLUDE.finditer(text):
        include = match.group(1)
        where = f"{path}:{line_of(text, match.start())}"
        target = include_target(files, path, include, ["layers", "tools", "cli"])
        if not target:
            continue
        if target.startswith(("tools/", "cli/")):
            problems.append(f"{where}: the layers include {include} ({target}); tools and the CLI sit above them")
            continue
        if target.startswith("layers/") and layer_concern(target) not in LAYER_DEPENDS.get(concern, set()):
            problems.append(f"{where}: layers/{concern or '(top)'} includes {include} ({target}); it may include "
                            f"only {', '.join(sorted(c or '(top)' for c in LAYER_DEPENDS[concern]))}")
    return problems


def check_includes(root, files):
    problems = []
    for path in files:
        if not path.endswith(SOURCE_SUFFIXES):
            continue
        top = path.split("/")[0]
        if top == "layers":
            problems += check_layer_includes(root, files, path, code_of(path, read(root, path)))
            continue
        if top == "cli":
            text = code_of(path, read(root, path))
            for match in INCLUDE.finditer(text):
                target = include_target(files, path, match.group(1), ["plugins"])
                if target:
                    problems.append(f"{path}:{line_of(text, match.start())}: the CLI includes {match.group(1)} "
                                    f"({target}); it reaches plugins through the registry and runtime/abi")
            continue
        if top not in ("runtime", "plugins"):
            continue
        text = code_of(path, read(root, path))
        for match in INCLUDE.finditer(text):
            include = match.group(1)
            where = f"{path}:{line_of(text, match.start())}"
            if top == "runtime":
                if resolves_within(root, files, path, include, ["runtime/include", "runtime/abi", "runtime/src"]):
                    continue
                target = include_target(files, path, include, ["layers", "plugins"])
                if target:
                    problems.append(f"{where}: the runtime includes {include} ({target}); it may not know the "
                                    "layers or the plugins")
            else:
                plugin_dir = "/".join(path.split("/")[:2])
                if resolves_within(root, files, path, include, [plugin_dir, plugin_dir + "/include",
                                                                plugin_dir + "/src"]):
                    continue
                target = include_target(files, path, include, ["runtime"])
                if target and not target.startswith("runtime/abi/"):
                    problems.append(f"{where}: a plugin includes {include} ({target}); plugins see only "
                                    "runtime/abi (metrale/plugin_abi.h)")
    return problems


def declared_names(root, files):
    """Backend names and non-runtime lever names, from the manifests and layers/core/levers.cpp."""
    backends, levers = set(EXTRA_BACKEND_WORDS), set()
    for path in files:
        if path.endswith(".json") and path.startswith(("manifests/", "plugins/")):
            try:
                doc = json.loads(read(root, path))
            except ValueError:
                continue
            if isinstance(doc, dict) and isinstance(doc.get("backend"), str):
                backends.add(doc["backend"])
                levers.update(l["name"] for l in doc.get("levers", []) if isinstance(l, dict) and "name" in l)
    if "layers/core/levers.cpp" in files:
        levers.update(re.findall(r'"(METRALE_[A-Z0-9_]+)"', read(root, "layers/core/levers.cpp")))
    return backends, levers


def catalogue_modules(root, files):
    """The kernel module names manifests/catalogue.json lists (the layers' kernel families)."""
    if CATALOGUE not in files:
        return set()
    try:
        doc = json.loads(read(root, CATALOGUE))
    except ValueError:
        return set()
    return {m["name"] for m in doc.get("modules", []) if isinstance(m, dict) and isinstance(m.get("name"), str)}


def is_extension_header(path):
    """A backend's extension header beside the ABI (runtime/abi/metrale/, other than the ABI itself
    and its glue): its types belong to that backend, which it may name."""
    return (path.startswith("runtime/abi/metrale/") and path.endswith(".h")
            and os.path.basename(path) not in ("plugin_abi.h", "plugin_glue.h"))


def check_names(root, files):
    backends, levers = declared_names(root, files)
    if not backends - set(EXTRA_BACKEND_WORDS):
        return ["no manifest with a backend name found under manifests/ or plugins/: nothing to check"]
    words = re.compile(r"\b(" + "|".join(re.escape(w) for w in sorted(backends | levers)) + r")\b", re.I)
    modules = catalogue_modules(root, files)
    if not modules:
        return [f"no kernel modules found in {CATALOGUE}: nothing to check"]
    module_words = re.compile(r"\b(" + "|".join(re.escape(m) for m in sorted(modules)) + r")\b", re.I)
    problems = []
    for path in files:
        if not path.startswith("runtime/") or is_extension_header(path):
            continue
        text = code_of(path, read(root, path))
        for match in words.finditer(text):
            problems.append(f"{path}:{line_of(text, match.start())}: the runtime names {match.group(1)!r} "
                            "(a backend or a lever the layers or a manifest declare)")
        for match in module_words.finditer(text):
            problems.append(f"{path}:{line_of(text, match.start())}: the runtime names the kernel module "
                            f"{match.group(1)!r} ({CATALOGUE}); what the layers pin reaches it as annotations")
    return problems


GENERIC_LINEAR = ("layers/linear/linear_plan.", "layers/linear/projection_set.", "layers/ffn/")
W4A16_BRANCH = re.compile(r"\b(KernelFamily::w4a16|WeightFormat::w4a16)\b")


def check_generic_linear(root, files):
    problems = []
    for path in files:
        if not path.startswith(GENERIC_LINEAR) or not path.endswith(SOURCE_SUFFIXES):
            continue
        text = code_of(path, read(root, path))
        for match in W4A16_BRANCH.finditer(text):
            problems.append(f"{path}:{line_of(text, match.start())}: generic linear code names {match.group(1)}; "
                            "W4A16 is one LinearPlan implementation (layers/linear/projection.cpp)")
    return problems


INSTALL_HEADERS = re.compile(r"install_headers\(([^)]*)\)", re.S)
QUOTED = re.compile(r"'([^']+\.(?:h|hpp))'")


def installed_layer_headers(root, files):
    """The layers headers layers/meson.build installs, as tree paths."""
    if "layers/meson.build" not in files:
        return set()
    text = strip_hash_comments(read(root, "layers/meson.build"))
    return {"layers/" + h for call in INSTALL_HEADERS.findall(text) for h in QUOTED.findall(call)}


def check_public_headers(root, files):
    problems = []
    installed = installed_layer_headers(root, files)
    public = {f for f in files if f.startswith(("runtime/include/", "runtime/abi/"))}
    for path in sorted(installed):
        if path not in files:
            problems.append(f"layers/meson.build installs {path}, which does not exist")
            continue
        text = code_of(path, read(root, path))
        for match in INCLUDE.finditer(text):
            include = match.group(1)
            target = include_target(files, path, include, ["layers", "runtime", "tools", "cli", "plugins"])
            if target and target not in installed and target not in public:
                problems.append(f"{path}:{line_of(text, match.start())}: the installed header includes {include} "
                                f"({target}), which is not installed: the public API would reach an internal header")
    return problems


def check(root):
    files = list_files(root)
    return (check_includes(root, set(files)) + check_names(root, files) + check_generic_linear(root, files)
            + check_public_headers(root, set(files)))


def self_test():
    """A tree with one violation of each kind: each must be reported."""
    tree = {
        "manifests/x.json": json.dumps({"backend": "xpu", "levers": [{"name": "METRALE_XPU_DEVICE"}]}),
        "manifests/catalogue.json": json.dumps({"modules": [{"name": "xgemm_a8", "kernels": []}]}),
        "layers/core/levers.cpp": '{"METRALE_LAYER_SWITCH", T::flag}',
        "layers/linear/selectors.hpp": "",
        "layers/meson.build": "install_headers('embed.hpp', install_dir: d)  # 'core/hidden.hpp' in a comment\n",
        "layers/embed.hpp": '#include "core/numeric.hpp"\n#include <metrale/levers.hpp>\n#include <vector>\n',
        "layers/linear/projection_set.cpp": "// KernelFamily::w4a16 in a comment is fine\n"
                                            "auto zp = KernelFamily::w4a16_zp;\nif (f == KernelFamily::w4a16) {}\n",
        "plugins/xpu/src/own.hpp": "",
        "plugins/xpu/src/plugin.cpp": '#include "own.hpp"\n#include <metrale/plugin_abi.h>\n'
                                      '#include <metrale/levers.hpp>\n',
        "runtime/abi/metrale/plugin_abi.h": "",
        "layers/io/config.hpp": '#include "ffn/ffn.hpp"\n#include "core/numeric.hpp"\n',
        "layers/ffn/ffn.hpp": '#include "bench/bench.hpp"\n',
        "layers/core/numeric.hpp": "",
        "tools/bench/bench.hpp": "",
        "plugins/xpu/include/metrale/xpu_ext.h": "",
        "cli/cmd.cpp": '#include <metrale/xpu_ext.h>\n',
        "runtime/include/metrale/levers.hpp": "",
        "runtime/src/a.cpp": '#include <metrale/levers.hpp>\n#include <layers/linear/selectors.hpp>\n'
                             '// xpu in a comment is fine\nauto b = "xpu"; auto l = "METRALE_LAYER_SWITCH";\n'
                             'auto d = "METRALE_XPU_DEVICE";\n'
                             '// xgemm_a8 in a comment is fine\nauto pin = "int8/xgemm_a8";\n',
    }
    expected = ["runtime/src/a.cpp:2: the runtime includes layers/linear/selectors.hpp",
                "layers/io/config.hpp:1: layers/io includes ffn/ffn.hpp",
                "layers/ffn/ffn.hpp:1: the layers include bench/bench.hpp",
                "cli/cmd.cpp:1: the CLI includes metrale/xpu_ext.h",
                "plugins/xpu/src/plugin.cpp:3: a plugin includes metrale/levers.hpp",
                "runtime/src/a.cpp:4: the runtime names 'xpu'",
                "runtime/src/a.cpp:4: the runtime names 'METRALE_LAYER_SWITCH'",
                "runtime/src/a.cpp:5: the runtime names 'METRALE_XPU_DEVICE'",
                "runtime/src/a.cpp:7: the runtime names the kernel module 'xgemm_a8'",
                "layers/linear/projection_set.cpp:3: generic linear code names KernelFamily::w4a16",
                "layers/embed.hpp:1: the installed header includes core/numeric.hpp"]
    return run_self_test(tree, expected, check, "metrale-layering-")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    problems = self_test() + check(sys.argv[1])
    for problem in problems:
        print(f"FAIL: {problem}")
    if not problems:
        print("layering ok: runtime/ knows no layer, plugin, backend, kernel module or non-runtime lever; plugins see only runtime/abi; "
              "the layers' concerns include downwards only; cli/ includes nothing of plugins/; "
              "generic linear code names no W4A16 family; installed headers include installed headers only")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
