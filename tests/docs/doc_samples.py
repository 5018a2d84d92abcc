#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Sample outputs and listed files in the docs, run again or read again and compared with what the
docs show (or rewritten).

A listed file is a fenced block right after `<!-- file: PATH -->` (PATH from the source root): the
block must be the file's text, exactly.

A sample is a fenced block right after a marker line:

    <!-- sample -->                      the commands run as written
    <!-- sample: METRALE_BACKEND=vendor -->   ... with these variables set (say so in the prose)
    <!-- sample: stdout -->              ... showing stdout alone (no progress lines from stderr)

In the block, a line starting with "$ " is a command; the lines after it, up to the next command
or the closing fence, are its output as the docs show it. Comparing, "…" stands for anything: a
line that is just "…" for any number of lines (0 included), "…" inside a line for any text (wide
lines are cut that way). Runs of spaces compare as one (table columns move with their contents),
and what differs from run to run or machine to machine is normalised on both sides: timings and
rates, source line numbers in audit sites, the CPU's target tier, and the paths of the run
(the vendor plugin's directory reads /tmp/vp, the build tree `build`).

The commands run in bash, in order, in a directory holding the example vendor plugin as installed
(vendor.json and libmetrale_vendor.so, built by tests/plugin_cts) and a link `build` to the build
tree, with that directory on METRALE_PLUGIN_PATH, `metrale` on PATH, no other METRALE_* variable,
and a CUDA driver that does not exist (samples are those of a machine without a GPU). Stdout and
stderr are both shown, unless the marker says `stdout`.

Usage: doc_samples.py --source DIR [--build DIR] [--rewrite] [FILE...]
  without --build: the listed files only (the samples need a build).
  without FILE: every docs/*.md and README.md under the source that has a marker.
  --rewrite: replace the output of each sample that no longer matches by today's (long lines cut
  with "…"); check the result and put back the elisions worth keeping.
Exit 0 when every sample matches (or was rewritten), 1 otherwise, naming file, line and difference.
"""

import argparse
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MARKER = re.compile(r"^<!--\s*sample(?::\s*(?P<env>.*?))?\s*-->\s*$")
FILE_MARKER = re.compile(r"^<!--\s*file:\s*(?P<path>\S+)\s*-->\s*$")
SEPARATOR = "@@@metrale-doc-sample@@@"
WIDTH = 200  # rewritten lines longer than this are cut with "…"
ELLIPSIS = "…"

# What varies between runs and machines, replaced on both sides before comparing.
VARIABLE = [
    # bench rows: "1.034 (1.034..1.034)" and everything numeric after it on the line
    (re.compile(r"\d+\.\d+ \(\d+\.\d+\.\.\d+\.\d+\).*"), "<timed row>"),
    (re.compile(r"median [\d.]+ ms \(min [\d.]+, max [\d.]+\)"), "median <t> ms"),
    (re.compile(r"= [\d.]+ GB/s, [\d.]+ GFLOP/s"), "= <rate>"),
    (re.compile(r"\bdone in [\d.]+ s\b"), "done in <t> s"),
    (re.compile(r"\bin [\d.]+ s: [\d.]+ tokens/s"), "in <t> s: <rate> tokens/s"),
    (re.compile(r"(\.(?:cpp|hpp|h)):\d+\b"), r"\1:<line>"),
    (re.compile(r"\bcpu-x86_64-(?:baseline|avx2|avx512bf16|avx512)\b"), "cpu-x86_64-<tier>"),
]


def canon(line):
    """The comparable form of a line: variable parts replaced, whitespace runs as one space."""
    for pattern, replacement in VARIABLE:
        line = pattern.sub(replacement, line)
    return " ".join(line.split())


@functools.lru_cache(maxsize=None)
def line_pattern(expected):
    parts = [re.escape(part) for part in canon(expected).split(ELLIPSIS)]
    return re.compile(r"\s*" + ".*".join(parts) + r"\s*")


# A progress line the CLI writes to stderr when a stage runs past half a second (cli/progress.hpp):
# "reference: 25%". How many appear depends on the machine's speed, so a sample that shows none
# matches output that has some.
PROGRESS = re.compile(r"^[\w .+/-]+: \d{1,3}%$")


def lines_match(expected, actual):
    """Whether the expected lines (with "…" lines as wildcards) match the actual ones, progress
    lines aside when the sample shows none."""
    if not any(PROGRESS.match(e.strip()) for e in expected):
        actual = [a for a in actual if not PROGRESS.match(a.strip())]

    @functools.lru_cache(maxsize=None)
    def match(i, j):
        if i == len(expected):
            return j == len(actual)
        if expected[i].strip() == ELLIPSIS:
            return match(i + 1, j) or (j < len(actual) and match(i, j + 1))
        return (j < len(actual) and line_pattern(expected[i]).fullmatch(canon(actual[j])) is not None
                and match(i + 1, j + 1))
    return match(0, 0)


def first_difference(expected, actual):
    """The first expected line that no alignment can match: (its index, its text)."""
    k = 0
    while k < len(expected) and lines_match(expected[:k + 1] + [ELLIPSIS], actual):
        k += 1
    return (k, expected[k]) if k < len(expected) else (k, "(end of the sample; today's output goes on)")


class Sample:
    """One marked block: where it is, the variables it sets, its commands and their outputs."""

    def __init__(self, path, marker_line, env, fence_start, fence_end, lines):
        self.path, self.marker_line, self.env = path, marker_line, env
        self.fence_start, self.fence_end = fence_start, fence_end  # indices of the fence lines
        self.commands = []  # (command, [expected lines])
        for line in lines[fence_start + 1:fence_end]:
            if line.startswith("$ "):
                self.commands.append((line[2:], []))
            elif self.commands:
                self.commands[-1][1].append(line)
            elif line.strip():
                raise SystemExit(f"{path}:{fence_start + 2}: a sample block starts with a '$ ' command line")


def find_samples(path):
    lines = path.read_text(encoding="utf-8").split("\n")
    samples = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise SystemExit(f"{path}:{i + 1}: a sample marker must be followed by a fenced block")
        end = next((k for k in range(i + 2, len(lines)) if lines[k].startswith("```")), None)
        if end is None:
            raise SystemExit(f"{path}:{i + 2}: the sample block is not closed")
        words = (m.group("env") or "").split()
        env = dict(word.split("=", 1) for word in words if "=" in word)
        flags = {word for word in words if "=" not in word}
        if flags - {"stdout"}:
            raise SystemExit(f"{path}:{i + 1}: unknown sample flag(s) {sorted(flags - {'stdout'})} (known: stdout)")
        samples.append(Sample(path, i + 1, env, i + 1, end, lines))
        samples[-1].stdout_only = "stdout" in flags
    return lines, samples


def find_listings(path):
    """(marker line number, file path, fence start, fence end) of each listed file."""
    lines = path.read_text(encoding="utf-8").split("\n")
    found = []
    for i, line in enumerate(lines):
        m = FILE_MARKER.match(line)
        if not m:
            continue
        end = next((k for k in range(i + 2, len(lines)) if lines[k].startswith("```")), None)
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```") or end is None:
            raise SystemExit(f"{path}:{i + 1}: a file marker must be followed by a closed fenced block")
        found.append((i + 1, m.group("path"), i + 1, end))
    return lines, found


def check_listings(path, source, rewrite):
    """Listed files whose block differs from the file (messages); with rewrite, the file's text goes in."""
    lines, listings = find_listings(path)
    problems = []
    for marker_line, name, start, end in reversed(listings):
        listed = source / name
        if not listed.is_file():
            problems.append(f"{path}:{marker_line}: the listed file {name} does not exist")
            continue
        text = listed.read_text(encoding="utf-8").rstrip("\n").split("\n")
        if lines[start + 1:end] != text:
            differ = next((k for k, (a, b) in enumerate(zip(lines[start + 1:end], text)) if a != b),
                          min(end - start - 1, len(text)))
            problems.append(f"{path}:{marker_line}: the block differs from {name} from its line {differ + 1}")
            lines[start + 1:end] = text
    if rewrite and problems:
        path.write_text("\n".join(lines), encoding="utf-8")
    return list(reversed(problems)), len(listings)


def workspace(source, build, root):
    """The directory the commands run in, and their environment."""
    vp = root / "vp"
    vp.mkdir()
    fixtures = build / "tests" / "plugin_cts"
    for name in ("libmetrale_vendor.so", "vendor.json"):
        if not (fixtures / name).exists():
            raise SystemExit(f"doc_samples: {fixtures / name} is missing: build the tree first (tests/plugin_cts)")
        shutil.copy(fixtures / name, vp / name)
    (vp / "build").symlink_to(build)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "metrale").symlink_to(build / "cli" / "metrale")
    env = {k: v for k, v in os.environ.items() if not k.startswith("METRALE_")}
    env.update(PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}", METRALE_PLUGIN_PATH=str(vp),
               METRALE_CUDA_DRIVER="/nonexistent/libcuda.so.1", XDG_DATA_HOME=str(root / "xdg-data"),
               XDG_CACHE_HOME=str(root / "xdg-cache"))
    env.pop("LD_LIBRARY_PATH", None)
    replacements = sorted({str(vp): "/tmp/vp", os.path.realpath(vp): "/tmp/vp", str(build): "build",
                           os.path.realpath(build): "build", str(source): ".", os.path.realpath(source): "."}.items(),
                          key=lambda kv: -len(kv[0]))
    return vp, env, replacements


def run_sample(sample, cwd, env, replacements):
    """Each command's output lines, in order, paths of this run replaced."""
    script = ["exec 2>/dev/null" if sample.stdout_only else "exec 2>&1"]
    for command, _ in sample.commands:
        script += [command, f"__status=$?; printf '\\n{SEPARATOR}\\n'; (exit $__status)"]
    run_env = dict(env, **sample.env)
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=cwd, env=run_env, stdout=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, timeout=600, check=False)
    text = done.stdout.decode("utf-8", "replace")
    for old, new in replacements:
        text = text.replace(old, new)
    outputs = []
    for chunk in text.split(f"\n{SEPARATOR}\n")[:len(sample.commands)]:
        lines = [line.rstrip() for line in chunk.split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        outputs.append(lines)
    return outputs


def cut(line):
    return line if len(line) <= WIDTH else line[:WIDTH - 1].rstrip() + ELLIPSIS


def check_file(path, cwd, env, replacements, rewrite):
    """Problems found (as messages); with rewrite, the file gets today's outputs where they differ."""
    lines, samples = find_samples(path)
    problems = []
    for sample in reversed(samples):  # bottom up, so rewriting keeps earlier line numbers valid
        outputs = run_sample(sample, cwd, env, replacements)
        block = []
        for (command, expected), actual in zip(sample.commands, outputs):
            block.append("$ " + command)
            if lines_match(expected, actual):
                block += expected
                continue
            k, line = first_difference(expected, actual)
            shown = "\n".join("    | " + a for a in actual[:40]) + ("\n    | …" if len(actual) > 40 else "")
            problems.append(f"{path}:{sample.marker_line}: `{command}`: its output no longer matches from sample "
                            f"line {k + 1}:\n    {line}\n  today's output:\n{shown}")
            block += [cut(a) for a in actual] if rewrite else expected
        lines[sample.fence_start + 1:sample.fence_end] = block
    if rewrite and problems:
        path.write_text("\n".join(lines), encoding="utf-8")
    return list(reversed(problems)), len(samples)


def self_test():
    """The comparison itself, on cases with known answers: a rule that stops working fails the run."""
    cases = [
        (["a  b", "…", "z"], ["a b", "x", "y", "z"], True),
        (["a", "…"], ["a"], True),
        (["row 1 …"], ["row 1 and the rest"], True),
        (["row 2 …"], ["row 1 and the rest"], False),
        (["a", "z"], ["a", "x", "z"], False),
        (["a"], ["a", "b"], False),
        (["t 1.0 (0.9..1.1) 5.0 GB"], ["t 7.5 (7.0..9.9) 0.1 GB"], True),
        (["1  cli/cmd_audit.cpp:84 run"], ["1 cli/cmd_audit.cpp:91 run"], True),
        (["cpu-x86_64-avx2 36 usable"], ["cpu-x86_64-avx512bf16 36 usable"], True),
        (["cpu-x86_64-avx2 36 usable"], ["cpu-x86_64-avx2 35 usable"], False),
        # A slow machine's progress lines do not break a sample that shows none...
        (["plan", "check PASS"], ["plan", "reference: 25%", "reference: 50%", "check PASS"], True),
        # ...but one that shows them is held to them, and other lines still count.
        (["reference: 25%", "check PASS"], ["check PASS"], False),
        (["plan", "check PASS"], ["plan", "reference: failed", "check PASS"], False),
    ]
    for expected, actual, want in cases:
        if lines_match(expected, actual) != want:
            raise SystemExit(f"doc_samples self-test: {expected} vs {actual} should {'' if want else 'not '}match")
    if first_difference(["a", "…", "q", "z"], ["a", "b", "z"])[0] != 2:
        raise SystemExit("doc_samples self-test: first_difference does not find the line that cannot match")


def marked_files(source):
    """The docs and READMEs of the source tree that hold at least one sample or file marker."""
    candidates = [*source.glob("docs/*.md"), source / "README.md", *source.glob("plugins/*/README.md"),
                  *source.glob("docs/examples/*/README.md")]
    return sorted(p for p in candidates if p.exists() and any(
        MARKER.match(line) or FILE_MARKER.match(line) for line in p.read_text(encoding="utf-8").split("\n")))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True, type=Path)
    parser.add_argument("--build", type=Path)
    parser.add_argument("--rewrite", action="store_true")
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args()
    self_test()
    source = args.source.resolve()
    files = args.files or marked_files(source)
    problems, samples, listings = [], 0, 0
    for path in files:
        found, n = check_listings(path, source, args.rewrite)
        problems += found
        listings += n
    if args.build is not None:
        with tempfile.TemporaryDirectory(prefix="metrale-doc-samples-") as tmp:
            cwd, env, replacements = workspace(source, args.build.resolve(), Path(tmp))
            for path in files:
                found, n = check_file(path, cwd, env, replacements, args.rewrite)
                problems += found
                samples += n
    for problem in problems:
        print(problem)
    what = "rewritten" if args.rewrite else "out of date"
    ran = f"{samples} sample block(s)" if args.build is not None else "no samples (no --build)"
    print(f"doc samples: {listings} listed file(s) and {ran} in {len(files)} file(s); {len(problems)} {what}")
    return 0 if args.rewrite or not problems else 1


if __name__ == "__main__":
    sys.exit(main())
