#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Writes <metrale/catalogue_signatures.h> from manifests/catalogue.json: every documented
kernel's parameter types and names, for C (one array each, named by module and kernel) and C++
(a constexpr table, find() by name at run time, signature() at compile time). The layers and the
plugins take their parameter lists from it, so catalogue.json is the one place a kernel's
parameters are written down (docs/kernels.md, "Where parameter lists come from").

Usage: catalogue_signatures.py CATALOGUE_JSON OUTPUT_HEADER. Exit 1, naming the kernel, on a
catalogue the header cannot express.
"""

import json
import re
import sys

TYPES = ("ptr", "u32", "i32", "u64", "i64", "f32", "f64")  # metrale_param_type, plugin_abi.h
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

HEAD = """\
/* SPDX-License-Identifier: MIT OR Apache-2.0
 * Generated from manifests/catalogue.json by runtime/catalogue_signatures.py: edit the catalogue,
 * not this file. Every kernel docs/kernels.md documents, with its parameter types and names in
 * launch order.
 *
 * C:   METRALE_CATALOGUE_TYPES(module, kernel), METRALE_CATALOGUE_NAMES(module, kernel),
 *      METRALE_CATALOGUE_PARAM_COUNT(module, kernel), and METRALE_CATALOGUE_DESC(module, kernel),
 *      a metrale_kernel_desc initializer; a kernel the catalogue lacks does not compile.
 * C++: metrale::catalogue::signature("module", "kernel") at compile time (the same),
 *      metrale::catalogue::find("module", "kernel") at run time (nullptr when undocumented).
 */
#ifndef METRALE_CATALOGUE_SIGNATURES_H
#define METRALE_CATALOGUE_SIGNATURES_H

#include <metrale/plugin_abi.h>

/* One definition per program in C++, usable in constant expressions; one copy per unit in C. */
#ifdef __cplusplus
#define METRALE_CATALOGUE_STORAGE inline constexpr
#else
#define METRALE_CATALOGUE_STORAGE static
#endif

#define METRALE_CATALOGUE_TYPES(module, kernel) metrale_catalogue_##module##_##kernel##_types
#define METRALE_CATALOGUE_NAMES(module, kernel) metrale_catalogue_##module##_##kernel##_names
#define METRALE_CATALOGUE_PARAM_COUNT(module, kernel) \\
  ((uint32_t)(sizeof METRALE_CATALOGUE_TYPES(module, kernel) / sizeof(metrale_param_type)))
#define METRALE_CATALOGUE_DESC(module, kernel) \\
  {#module, #kernel, METRALE_CATALOGUE_TYPES(module, kernel), METRALE_CATALOGUE_PARAM_COUNT(module, kernel)}
"""

CPP_HEAD = """
#ifdef __cplusplus
#include <array>
#include <cstddef>
#include <span>
#include <string_view>

namespace metrale::catalogue {

struct DocumentedKernel {
  const char* module;
  const char* name;
  std::span<const metrale_param_type> types;
  std::span<const char* const> names;
};
"""

CPP_TAIL = """
// The index in kKernels of the documented kernel `module`/`name`, or kNotDocumented. An index, not
// a pointer: GCC under -fsanitize=undefined does not fold a pointer's comparison with null.
inline constexpr std::size_t kNotDocumented = static_cast<std::size_t>(-1);
constexpr std::size_t index_of(std::string_view module, std::string_view name) noexcept {
  for (std::size_t i = 0; i < kKernels.size(); ++i) {
    if (module == kKernels[i].module && name == kKernels[i].name) return i;
  }
  return kNotDocumented;
}

// The documented kernel `module`/`name`, or nullptr.
constexpr const DocumentedKernel* find(std::string_view module, std::string_view name) noexcept {
  const std::size_t i = index_of(module, name);
  return i == kNotDocumented ? nullptr : &kKernels[i];
}

// Not constexpr: signature() reaching it fails to compile, and the error names it.
inline void kernel_not_in_manifests_catalogue_json() {}

// `module`/`name`'s parameter types, for a lookup's expected list; compile time only.
consteval std::span<const metrale_param_type> signature(std::string_view module, std::string_view name) {
  const std::size_t i = index_of(module, name);
  if (i == kNotDocumented) kernel_not_in_manifests_catalogue_json();
  return kKernels[i].types;
}

}  // namespace metrale::catalogue
#endif

#endif
"""


class CatalogueError(Exception):
    pass


def kernels_of(catalogue):
    """[(module, kernel, [(name, type)])] in the catalogue's order, checked for what C needs."""
    out, c_names = [], {}
    for module in catalogue["modules"]:
        for kernel in module["kernels"]:
            where = f"{module['name']}/{kernel['name']}"
            params = [(p["name"], p["type"]) for p in kernel["params"]]
            if not all(IDENTIFIER.match(n) for n in (module["name"], kernel["name"])):
                raise CatalogueError(f"{where}: module and kernel names must be identifiers")
            if not params:
                raise CatalogueError(f"{where}: no parameters (C has no empty arrays)")
            for name, type_ in params:
                if type_ not in TYPES:
                    raise CatalogueError(f"{where}: parameter {name} has type {type_!r}, not one of {', '.join(TYPES)}")
            c_name = f"{module['name']}_{kernel['name']}"
            if c_name in c_names:
                raise CatalogueError(f"{where} and {c_names[c_name]} both make the C name metrale_catalogue_{c_name}_*")
            c_names[c_name] = where
            out.append((module["name"], kernel["name"], params))
    return out


def header(kernels):
    lines = [HEAD]
    for module, kernel, params in kernels:
        listed = ", ".join(f"{n}: {t}" for n, t in params)
        types = ", ".join(f"METRALE_PARAM_{t.upper()}" for _, t in params)
        names = ", ".join(f'"{n}"' for n, _ in params)
        lines += [f"/* {module}/{kernel}({listed}) */",
                  f"METRALE_CATALOGUE_STORAGE const metrale_param_type metrale_catalogue_{module}_{kernel}_types[] = {{{types}}};",
                  f"METRALE_CATALOGUE_STORAGE const char* const metrale_catalogue_{module}_{kernel}_names[] = {{{names}}};"]
    lines.append(CPP_HEAD)
    lines.append(f"inline constexpr std::array<DocumentedKernel, {len(kernels)}> kKernels{{{{")
    for module, kernel, _ in kernels:
        lines.append(f'    {{"{module}", "{kernel}", METRALE_CATALOGUE_TYPES({module}, {kernel}), '
                     f"METRALE_CATALOGUE_NAMES({module}, {kernel})}},")
    lines.append("}};")
    lines.append(CPP_TAIL)
    return "\n".join(lines)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    source, output = sys.argv[1], sys.argv[2]
    try:
        with open(source, encoding="utf-8") as f:
            text = header(kernels_of(json.load(f)))
    except (OSError, ValueError, KeyError, TypeError, CatalogueError) as e:
        print(f"{source}: {e}", file=sys.stderr)
        return 1
    with open(output, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
