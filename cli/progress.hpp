// SPDX-License-Identifier: MIT OR Apache-2.0
// Progress of long work (weight generation, reference computation) on stderr: one updating line
// on a terminal, a line every 25% otherwise; a stage that ends within half a second prints
// nothing. stdout stays clean for command output.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <string_view>

namespace metrale::cli {

class StderrProgress {
 public:
  explicit StderrProgress(bool enabled = true);
  // fraction in [0, 1]; thread-safe.
  void update(std::string_view stage, double fraction);
  // Starts timing `stage` (so finish() can tell how long it took) without printing.
  void begin(std::string_view stage) { update(stage, 0.0); }
  // Ends the stage with "done in X s" when it printed or took long.
  void finish(std::string_view stage);
  // update(stage, fraction), or finish(stage) at 1: the form of a LayerRequest's progress
  // callback. Reports to this object, which must outlive the callback's use.
  void report(const std::string& stage, double fraction) {
    if (fraction >= 1.0)
      finish(stage);
    else
      update(stage, fraction);
  }

 private:
  bool enabled_;
  bool tty_;
  std::mutex mutex_;
  std::string stage_;
  int last_quarter_ = -1;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace metrale::cli
