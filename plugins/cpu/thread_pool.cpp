// SPDX-License-Identifier: MIT OR Apache-2.0
#include "thread_pool.hpp"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define METRALE_CPU_PAUSE() _mm_pause()
#else
#define METRALE_CPU_PAUSE() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace metrale::cpu {

namespace {

// Every block runs under the default SSE environment (round to nearest, no flush to zero, no
// denormals-are-zero, exceptions masked), whatever the application set on its thread (e.g. code
// built with -ffast-math sets FTZ and DAZ at start): the kernels' E4M3 decodes build subnormal
// f32 values on purpose, and the quantizers round with the current mode. The calling thread's
// setting is restored when run() returns; workers are the pool's own and keep the default.
#if defined(__x86_64__) || defined(__i386__)
constexpr unsigned kDefaultMxcsr = 0x1f80, kMxcsrFlags = 0x3f;  // the flags: sticky exception bits
class DefaultFloatingPoint {
 public:
  DefaultFloatingPoint() : saved_(_mm_getcsr()), changed_((saved_ & ~kMxcsrFlags) != kDefaultMxcsr) {
    if (changed_) _mm_setcsr(kDefaultMxcsr);
  }
  ~DefaultFloatingPoint() {
    if (changed_) _mm_setcsr(saved_);
  }
  DefaultFloatingPoint(const DefaultFloatingPoint&) = delete;
  DefaultFloatingPoint& operator=(const DefaultFloatingPoint&) = delete;

 private:
  unsigned saved_;
  bool changed_;
};
#else
struct DefaultFloatingPoint {};
#endif

// How long an idle worker spins before it sleeps: longer than the gap between the kernels of
// one decode step, short enough not to burn a core when the process goes quiet.
constexpr auto kSpin = std::chrono::microseconds(100);

// The CPUs of the calling thread's affinity mask (the process's, as the application set it), in
// ascending order; empty with `error` set when the mask cannot be read.
std::vector<int> affinity_cpus(std::string& error) {
  std::vector<int> cpus;
  // The mask may be wider than cpu_set_t's 1024 CPUs: grow until the kernel accepts the size.
  for (int width = CPU_SETSIZE; width <= (1 << 20); width *= 2) {
    cpu_set_t* set = CPU_ALLOC(width);
    if (set == nullptr) {
      error = "cannot allocate a CPU set";
      return cpus;
    }
    const size_t bytes = CPU_ALLOC_SIZE(width);
    CPU_ZERO_S(bytes, set);
    if (sched_getaffinity(0, bytes, set) == 0) {
      for (int cpu = 0; cpu < width; ++cpu)
        if (CPU_ISSET_S(cpu, bytes, set)) cpus.push_back(cpu);
      CPU_FREE(set);
      if (cpus.empty()) error = "the affinity mask is empty";
      return cpus;
    }
    const int failure = errno;
    CPU_FREE(set);
    if (failure != EINVAL) {
      error = std::string("sched_getaffinity: ") + std::strerror(failure);
      return cpus;
    }
  }
  error = "sched_getaffinity: the affinity mask is wider than 2^20 CPUs";
  return cpus;
}

}  // namespace

ThreadPool::ThreadPool(unsigned threads, bool pin) : ranges_(threads > 1 ? threads : 1) {
  const unsigned workers = threads > 1 ? threads - 1 : 0;
  workers_.reserve(workers);
  try {
    for (unsigned slot = 1; slot <= workers; ++slot)
      workers_.emplace_back([this, slot] { worker_main(slot); });
    if (pin) pin_workers();  // inside the try: an exception must still join the workers
  } catch (...) {
    stop_.store(true);
    generation_.fetch_add(2);
    { std::lock_guard<std::mutex> lock(sleep_mutex_); }
    wake_.notify_all();
    for (auto& worker : workers_) worker.join();
    throw;
  }
}

void ThreadPool::pin_workers() {
  if (workers_.empty()) return;
  std::string error;
  const std::vector<int> cpus = affinity_cpus(error);
  if (cpus.empty()) {
    pin_failures_.push_back("cannot pin the pool's workers: " + error);
    return;
  }
  const int width = cpus.back() + 1;
  const auto free_set = [](cpu_set_t* set) { CPU_FREE(set); };
  const std::unique_ptr<cpu_set_t, decltype(free_set)> owned(CPU_ALLOC(width), free_set);
  cpu_set_t* const set = owned.get();
  if (set == nullptr) {
    pin_failures_.push_back("cannot pin the pool's workers: cannot allocate a CPU set");
    return;
  }
  const size_t bytes = CPU_ALLOC_SIZE(width);
  for (size_t index = 0; index < workers_.size(); ++index) {
    const size_t slot = index + 1;
    const int cpu = cpus[slot % cpus.size()];
    CPU_ZERO_S(bytes, set);
    CPU_SET_S(cpu, bytes, set);
    const int status = pthread_setaffinity_np(workers_[index].native_handle(), bytes, set);
    if (status == 0) {
      ++pinned_;
    } else {
      pin_failures_.push_back("cannot pin worker " + std::to_string(slot) + " to CPU " +
                              std::to_string(cpu) + ": pthread_setaffinity_np: " +
                              std::strerror(status) + "; it runs unpinned");
    }
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
  const DefaultFloatingPoint environment;
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
  const uint64_t slots = ranges_.size();
  for (uint64_t slot = 0; slot < slots; ++slot) {
    ranges_[slot].next.store(count * slot / slots, std::memory_order_relaxed);
    ranges_[slot].end = count * (slot + 1) / slots;
  }
  done_.store(0, std::memory_order_relaxed);
  generation_.store(generation + 2);
  if (sleepers_.load() != 0) {
    { std::lock_guard<std::mutex> sleep_lock(sleep_mutex_); }
    wake_.notify_all();
  }

  const uint64_t mine = work(0, fn, context);
  if (mine != 0) done_.fetch_add(mine, std::memory_order_acq_rel);
  // The other blocks are in flight on workers; they finish within one block's time.
  for (unsigned spins = 0; done_.load(std::memory_order_acquire) < count; ++spins) {
    if (spins < 4096)
      METRALE_CPU_PAUSE();
    else
      std::this_thread::yield();  // a worker was descheduled: give it the core
  }
}

uint64_t ThreadPool::work(unsigned slot, TaskFn fn, void* context) {
  uint64_t mine = 0;
  const auto slots = static_cast<unsigned>(ranges_.size());
  for (unsigned k = 0; k < slots; ++k) {
    Range& range = ranges_[(slot + k) % slots];
    for (uint64_t task; (task = range.next.fetch_add(1, std::memory_order_relaxed)) < range.end; ++mine)
      fn(context, task, slot);
  }
  return mine;
}

void ThreadPool::worker_main(unsigned slot) {
  // The generation at construction, not at the thread's start: a worker that starts after the
  // first run() was published still joins that job.
  uint32_t seen = 0;
  const DefaultFloatingPoint environment;  // never restored: the thread is the pool's
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
    const uint64_t mine = work(slot, fn, context);
    if (mine != 0) done_.fetch_add(mine, std::memory_order_acq_rel);
    active_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace metrale::cpu
