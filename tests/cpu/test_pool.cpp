// SPDX-License-Identifier: MIT OR Apache-2.0
// The CPU plugin's thread pool: how it deals blocks out (directly), and through the C ABI
// concurrent launchers and sparse launches, and the pin option's placement of the workers.
#include "support.hpp"
#include "thread_pool.hpp"

#include <doctest/doctest.h>
#include <sched.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace cpu_test;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The ids of this process's threads, from /proc/self/task.
std::set<pid_t> thread_ids() {
  std::set<pid_t> ids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task"))
    ids.insert(static_cast<pid_t>(std::stol(entry.path().filename().string())));
  return ids;
}

// The CPUs of a thread's affinity mask (tid 0: the calling thread), ascending.
std::vector<int> affinity(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE_MESSAGE(sched_getaffinity(tid, sizeof set, &set) == 0, "sched_getaffinity(" << tid << ")");
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// The threads a Backend with these options starts (its pool's workers): the ids that appear
// while it is created. The tests run one at a time, so no other thread starts meanwhile.
std::vector<pid_t> workers_of(const std::function<void()>& create) {
  const std::set<pid_t> before = thread_ids();
  create();
  std::vector<pid_t> started;
  for (pid_t id : thread_ids())
    if (before.count(id) == 0) started.push_back(id);
  return started;
}

}  // namespace

TEST_CASE("thread pool: every task runs once, each slot its own contiguous range first, then the others'") {
  SUBCASE("counts 1..100 on three threads: each task exactly once") {
    metrale::cpu::ThreadPool pool(3);
    for (uint64_t count = 1; count <= 100; ++count) {
      std::vector<std::atomic<int>> runs(count);
      pool.run(count, [](void* context, uint64_t task, unsigned) {
        (*static_cast<std::vector<std::atomic<int>>*>(context))[task].fetch_add(1);
      }, &runs);
      for (uint64_t task = 0; task < count; ++task) CHECK_MESSAGE(runs[task].load() == 1, "count " << count << " task " << task);
    }
  }
  SUBCASE("8 tasks, 2 threads: the worker runs 4..7, then takes 1..3 while the caller is held in task 0") {
    // Task 4 (the worker's first) waits until task 0 has started; task 0 until all the others
    // are done. A shared counter would hand the worker task 0 or 1 first.
    struct Schedule {
      std::mutex mutex;
      std::vector<uint64_t> order[2];
      std::atomic<bool> zero_started{false}, timed_out{false};
      std::atomic<int> others_done{0};
      void wait(const std::function<bool()>& ready) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!ready())
          if (std::chrono::steady_clock::now() > deadline) {
            timed_out = true;
            return;
          }
      }
    } schedule;
    metrale::cpu::ThreadPool pool(2);
    pool.run(8, [](void* context, uint64_t task, unsigned slot) {
      auto& s = *static_cast<Schedule*>(context);
      {
        std::lock_guard lock(s.mutex);
        s.order[slot].push_back(task);
      }
      if (task == 0) {
        s.zero_started = true;
        s.wait([&] { return s.others_done.load() == 7; });
      } else {
        if (task == 4) s.wait([&] { return s.zero_started.load(); });
        s.others_done.fetch_add(1);
      }
    }, &schedule);
    CHECK_FALSE(schedule.timed_out.load());
    CHECK(schedule.order[0] == std::vector<uint64_t>{0});
    CHECK(schedule.order[1] == std::vector<uint64_t>{4, 5, 6, 7, 1, 2, 3});
  }
}

TEST_CASE("thread pool: concurrent launchers and sparse launches stay correct") {
  // Two threads launch into one instance; between bursts the workers fall asleep and must wake.
  Backend b({{"threads", "3"}, {"target", "baseline"}});
  const uint32_t n = 640, k = 128;
  std::vector<uint16_t> xv(k);
  for (uint32_t t = 0; t < k; ++t) xv[t] = to_bf16(t % 2 ? 1.0 : 0.0);  // odd k only
  // Codes 9 (value +1) everywhere, scale 1.0 (f16 0x3c00): y = number of odd k = 64.
  std::vector<uint32_t> qv(size_t{n} * k / 8, 0x99999999u);
  std::vector<uint16_t> sv(size_t{n} * k / 128, 0x3c00);
  const uint64_t x = b.upload(xv), q = b.upload(qv), s = b.upload(sv);
  const uint64_t gemv = b.kernel("w4a16", "w4a16_gemv");
  std::atomic<int> wrong{0};
  auto launcher = [&](int id) {
    const uint64_t y = [&] {
      static std::mutex mutex;
      std::lock_guard lock(mutex);
      return b.alloc(n * 2);
    }();
    for (int i = 0; i < 300; ++i) {
      std::vector<uint16_t> zero(n, 0);
      if (b.table().copy_to_device(b.raw(), y, zero.data(), n * 2, 0) != METRALE_STATUS_OK) ++wrong;
      Args args;
      args.ptr(x).ptr(q).ptr(s).ptr(y).u32(1).u32(n).u32(k);
      if (b.launch(gemv, {n / 64, 1}, args) != METRALE_STATUS_OK) ++wrong;
      std::vector<uint16_t> out(n);
      if (b.table().copy_to_host(b.raw(), out.data(), y, n * 2, 0) != METRALE_STATUS_OK) ++wrong;
      for (uint16_t v : out) wrong += bf16_value(v) != 64.0;
      if (i % 50 == id) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  std::thread first(launcher, 0), second(launcher, 1);
  first.join();
  second.join();
  CHECK(wrong.load() == 0);
}

TEST_CASE("pin=1 pins each pool worker to one CPU of the mask; without it they keep the mask") {
  const std::vector<int> mask = affinity(0);
  REQUIRE_FALSE(mask.empty());
  if (mask.size() < 2) {
    MESSAGE("skipped: the process's affinity mask has one CPU, so every thread is trivially pinned");
    return;
  }
  SUBCASE("threads=2 with pin=1: the one worker is on the mask's second CPU") {
    std::unique_ptr<Backend> b;
    const auto workers = workers_of([&] { b = std::make_unique<Backend>(Options{{"threads", "2"}, {"pin", "1"}}); });
    REQUIRE(workers.size() == 1);
    CHECK(affinity(workers[0]) == std::vector<int>{mask[1]});
    CHECK(affinity(0) == mask);  // the calling thread is the application's: left alone
    bool reported = false;
    for (const LogLine& line : b->log()) {
      INFO(line.text);
      CHECK(line.level != METRALE_LOG_WARN);
      reported |= line.level == METRALE_LOG_DEBUG && line.text.ends_with("2 threads, pinned");
    }
    CHECK(reported);
  }
  SUBCASE("more workers than CPUs wrap around the mask") {
    const size_t threads = mask.size() + 2;
    std::unique_ptr<Backend> b;
    const auto workers = workers_of([&] {
      b = std::make_unique<Backend>(Options{{"threads", std::to_string(threads)}, {"pin", "1"}});
    });
    REQUIRE(workers.size() == threads - 1);
    std::vector<int> expected, got;
    for (size_t slot = 1; slot < threads; ++slot) expected.push_back(mask[slot % mask.size()]);
    for (pid_t worker : workers) {
      const std::vector<int> cpus = affinity(worker);
      REQUIRE(cpus.size() == 1);
      got.push_back(cpus[0]);
    }
    std::sort(expected.begin(), expected.end());
    std::sort(got.begin(), got.end());
    CHECK(got == expected);
  }
  SUBCASE("without pin, or with pin=0, the worker keeps the whole mask") {
    for (const char* pin : {"0", static_cast<const char*>(nullptr)}) {
      INFO("pin " << (pin ? pin : "(not given)"));
      Options options{{"threads", "2"}};
      if (pin != nullptr) options.emplace_back("pin", pin);
      std::unique_ptr<Backend> b;
      const auto workers = workers_of([&] { b = std::make_unique<Backend>(options); });
      REQUIRE(workers.size() == 1);
      CHECK(affinity(workers[0]) == mask);
      for (const LogLine& line : b->log()) CHECK_FALSE(contains(line.text, "pinned"));
    }
  }
}

#if defined(__x86_64__)
// A pool made and run from a thread with flush-to-zero, denormals-are-zero and rounding toward
// zero set: every task, on the caller and on the workers (which inherit the creator's MXCSR),
// sees the default control bits; the caller's own come back when run() returns. Each task waits
// until a worker has run one, so the workers cannot be left out.
TEST_CASE("thread pool: tasks run under the default MXCSR whatever the caller set") {
  struct Seen {
    std::vector<unsigned> control;
    std::atomic<bool> worker_ran{false};
  };
  const unsigned saved = _mm_getcsr();
  const unsigned odd = (saved & ~0x3fu) | 0x8040u | 0x6000u;  // FTZ, DAZ, round toward zero
  _mm_setcsr(odd);
  {
    metrale::cpu::ThreadPool pool(3);
    for (const uint64_t count : {uint64_t{1}, uint64_t{64}}) {
      Seen seen{std::vector<unsigned>(count), {}};
      pool.run(count, [](void* context, uint64_t task, unsigned slot) {
        auto& s = *static_cast<Seen*>(context);
        s.control[task] = _mm_getcsr() & ~0x3fu;
        if (slot != 0) s.worker_ran = true;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (s.control.size() > 1 && !s.worker_ran && std::chrono::steady_clock::now() < deadline) {
        }
      }, &seen);
      for (uint64_t task = 0; task < count; ++task) CHECK_MESSAGE(seen.control[task] == 0x1f80u, "count " << count << " task " << task);
      if (count > 1) CHECK(seen.worker_ran.load());
      CHECK((_mm_getcsr() & ~0x3fu) == (odd & ~0x3fu));
    }
  }
  _mm_setcsr(saved);
}
#endif
