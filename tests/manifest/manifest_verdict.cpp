// SPDX-License-Identifier: MIT OR Apache-2.0
// Prints the runtime validator's verdict on each manifest named on the command line, one line
// per file: "<accept|reject|skip>\t<file>\t<problems joined by ' | '>". schema_agreement.py
// compares these verdicts with the JSON Schema's.
#include <metrale/manifest.hpp>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MANIFEST...\n", argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    const metrale::ManifestResult r = metrale::load_manifest(argv[i]);
    const char* verdict = r.manifest ? "accept" : (r.skipped_format ? "skip" : "reject");
    std::string problems;
    for (const metrale::ManifestProblem& p : r.problems) {
      problems += (problems.empty() ? "" : " | ") + p.pointer + ": " + p.message;
    }
    std::printf("%s\t%s\t%s\n", verdict, argv[i], problems.c_str());
  }
  return 0;
}
