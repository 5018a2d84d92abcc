// SPDX-License-Identifier: MIT OR Apache-2.0
#include "thread_pool.hpp"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define METRALE_CPU_PAUSE() _mm_pause()
#else
#define METRALE_CPU_PAUSE() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace metrale::cpu {

namespace {

// How long an idle worker spins before it sleeps: longer than the gap between the kernels of
// one decode step, short enough not to burn a core when the process goes quiet.
constexpr auto kSpin = std::chrono::microseconds(100);

}  // namespace

ThreadPool::ThreadPool(unsigned threads) {
  const unsigned workers = threads > 1 ? threads - 1 : 0;
  workers_.reserve(workers);
  try {
    for (unsigned slot = 1; slot <= workers; ++slot)
      workers_.emplace_back([this, slot] { worker_main(slot); });
  } catch (...) {
    stop_.store(true);
    generation_.fetch_add(2);
    { std::lock_guard<std::mutex> lock(sleep_mutex_); }
    wake_.notify_all();
    for (auto& worker : workers_) worker.join();
    throw;
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    stop_.store(true);
    generation_.fetch_add(2);
  }
  { std::lock_guard<std::mutex> lock(sleep_mutex_); }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

bool ThreadPool::job_ready(uint32_t seen) const noexcept {
  const uint32_t generation = generation_.load();
  return (generation != seen && (generation & 1u) == 0) || stop_.load();
}

void ThreadPool::run(uint64_t count, TaskFn fn, void* context) {
  if (count == 0) return;
  std::lock_guard<std::mutex> lock(run_mutex_);
  // One task or no workers: no one to share with, skip the hand-off.
  if (count == 1 || workers_.empty()) {
    for (uint64_t task = 0; task < count; ++task) fn(context, task, 0);
    return;
  }
  // Close the slot, wait for stragglers of the previous job to leave, rewrite, reopen.
  const uint32_t generation = generation_.load(std::memory_order_relaxed);
  generation_.store(generation + 1);
  while (active_.load() != 0) METRALE_CPU_PAUSE();
  fn_ = fn;
  context_ = context;
  count_ = count;
  next_.store(0, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  generation_.store(generation + 2);
  if (sleepers_.load() != 0) {
    { std::lock_guard<std::mutex> sleep_lock(sleep_mutex_); }
    wake_.notify_all();
  }

  uint64_t mine = 0;
  for (uint64_t task; (task = next_.fetch_add(1, std::memory_order_relaxed)) < count; ++mine)
    fn(context, task, 0);
  if (mine != 0) done_.fetch_add(mine, std::memory_order_acq_rel);
  // The other blocks are in flight on workers; they finish within one block's time.
  for (unsigned spins = 0; done_.load(std::memory_order_acquire) < count; ++spins) {
    if (spins < 4096)
      METRALE_CPU_PAUSE();
    else
      std::this_thread::yield();  // a worker was descheduled: give it the core
  }
}

void ThreadPool::worker_main(unsigned slot) {
  uint32_t seen = generation_.load();
  for (;;) {
    // Spin, then sleep, until a new open generation (or stop) appears.
    if (!job_ready(seen)) {
      const auto deadline = std::chrono::steady_clock::now() + kSpin;
      unsigned spins = 0;
      while (!job_ready(seen)) {
        METRALE_CPU_PAUSE();
        if ((++spins & 63u) == 0 && std::chrono::steady_clock::now() > deadline) break;
      }
      if (!job_ready(seen)) {
        std::unique_lock<std::mutex> lock(sleep_mutex_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return job_ready(seen); });
        sleepers_.fetch_sub(1);
      }
    }
    if (stop_.load()) return;
    const uint32_t generation = generation_.load();
    if ((generation & 1u) != 0 || generation == seen) continue;
    seen = generation;
    // Join the job; if the slot was closed meanwhile, back out and wait for the next one.
    active_.fetch_add(1);
    if (generation_.load() != generation) {
      active_.fetch_sub(1);
      continue;
    }
    const TaskFn fn = fn_;
    void* const context = context_;
    const uint64_t count = count_;
    uint64_t mine = 0;
    for (uint64_t task; (task = next_.fetch_add(1, std::memory_order_relaxed)) < count; ++mine)
      fn(context, task, slot);
    if (mine != 0) done_.fetch_add(mine, std::memory_order_acq_rel);
    active_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace metrale::cpu
