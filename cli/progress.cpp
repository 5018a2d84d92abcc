// SPDX-License-Identifier: MIT OR Apache-2.0
#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace metrale::cli {

namespace {
// Work that finishes faster than this prints nothing: progress is for long work only.
constexpr double kQuietSeconds = 0.5;
}  // namespace

StderrProgress::StderrProgress(bool enabled) : enabled_(enabled), tty_(::isatty(2) == 1) {}

void StderrProgress::update(std::string_view stage, double fraction) {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (stage != stage_) {
    if (tty_ && shown_) std::fputc('\n', stderr);
    stage_ = stage;
    last_quarter_ = -1;
    shown_ = false;
    start_ = now;
  }
  if (std::chrono::duration<double>(now - start_).count() < kQuietSeconds) return;
  const int percent = static_cast<int>(fraction * 100.0);
  if (tty_) {
    std::fprintf(stderr, "\r%s: %3d%%", stage_.c_str(), percent);
    shown_ = true;
  } else if (percent / 25 > last_quarter_) {
    last_quarter_ = percent / 25;
    std::fprintf(stderr, "%s: %d%%\n", stage_.c_str(), percent);
    shown_ = true;
  }
  std::fflush(stderr);
}

void StderrProgress::finish(std::string_view stage) {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (shown_ || (stage == stage_ && seconds >= kQuietSeconds)) {
    std::fprintf(stderr, tty_ && shown_ ? "\r%s: done in %.1f s\n" : "%s: done in %.1f s\n",
                 std::string(stage).c_str(), seconds);
  }
  stage_.clear();
  shown_ = false;
  last_quarter_ = -1;
}

}  // namespace metrale::cli
