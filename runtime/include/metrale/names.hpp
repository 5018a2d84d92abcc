// SPDX-License-Identifier: MIT OR Apache-2.0
// Matching names typed by people: shell globs (METRALE_BACKENDS_DISABLE, conformance and bench
// filters) and "did you mean" suggestions (levers, manifest keys, backend names). Pure functions.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace metrale {

// fnmatch(3) without flags: '*' any run, '?' one character, '[...]' a set.
bool glob_match(std::string_view pattern, std::string_view text);
// Whether one of `patterns` matches `text` (none given: false).
bool glob_match_any(std::span<const std::string> patterns, std::string_view text);

// Damerau-Levenshtein distance (optimal string alignment): a swapped pair of letters is one edit,
// the most common typo in names.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `name` (ties: the first), or nullopt when there are none.
std::optional<std::string> nearest_name(std::string_view name, std::span<const std::string_view> candidates);
// The nearest candidate when it is close enough to be a typo of `name` (at most max(2, |candidate|/3)
// edits), else nullopt.
std::optional<std::string> likely_typo_of(std::string_view name, std::span<const std::string_view> candidates);

}  // namespace metrale
