// SPDX-License-Identifier: MIT OR Apache-2.0
// The CPU backend's thread pool: persistent workers that run the blocks of one launch.
//
// run() publishes a job by bumping a generation counter; workers spin on it briefly (decode
// kernels come every few tens of microseconds, and a futex wake costs about as much) and then
// sleep on a condition variable, which run() signals only when someone sleeps. The calling
// thread takes blocks too, so a pool of one thread has no workers at all. Nothing is allocated
// per run.
//
// Each slot owns one contiguous range of the blocks, taken in order from an atomic cursor, and
// then helps the others from their cursors until none is left: neighbouring blocks (a weight
// matrix's next tiles, an expert's next column tile, a sequence's next cache split) run on one
// core, whose prefetches of the memory after its block are then its own next reads, not another
// core's; the stealing keeps the balance of a shared counter.
//
// Pinning (optional): each worker is bound to one CPU of the process's affinity mask when the
// pool starts; worker slot i gets the i-th CPU of the mask (counting from 0, wrapping around),
// so with threads <= CPUs the mask's first CPU is left to the calling thread, which is never
// pinned: it belongs to the application.
//
// Floating point: on x86 every task runs with the default MXCSR (nearest, no FTZ/DAZ); run()
// restores the caller's own setting before it returns.
//
// Thread-safety: run() may be called from several threads; calls are serialised (one job at a
// time), because the job slot and the per-slot scratch are shared.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace metrale::cpu {

class ThreadPool {
 public:
  // fn(context, task, slot): slot 0 is the calling thread, 1..threads-1 the workers.
  using TaskFn = void (*)(void* context, uint64_t task, unsigned slot);

  // `threads` counts the calling thread; threads - 1 workers are started. With `pin`, each
  // worker is pinned to one CPU before the constructor returns; a worker that cannot be pinned
  // runs unpinned and the reason is kept in pin_failures(). Throws std::system_error when a
  // thread cannot be started.
  explicit ThreadPool(unsigned threads, bool pin = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned threads() const noexcept { return static_cast<unsigned>(workers_.size()) + 1; }
  // Workers pinned to a CPU (0 unless the pool was asked to pin).
  unsigned pinned() const noexcept { return pinned_; }
  // One message per worker that could not be pinned (or one for the whole pool when the
  // process's affinity mask cannot be read).
  const std::vector<std::string>& pin_failures() const noexcept { return pin_failures_; }

  // Runs fn for every task in [0, count) and returns when all have finished.
  void run(uint64_t count, TaskFn fn, void* context);

 private:
  void worker_main(unsigned slot);
  // Runs tasks of the open job as `slot`: its own range, then the others'. Returns how many.
  uint64_t work(unsigned slot, TaskFn fn, void* context);
  bool job_ready(uint32_t seen) const noexcept;
  void pin_workers();

  std::vector<std::thread> workers_;
  unsigned pinned_ = 0;
  std::vector<std::string> pin_failures_;
  std::mutex run_mutex_;  // one job at a time

  // Generation: even = a job is open, odd = the job slot is being rewritten.
  std::atomic<uint32_t> generation_{0};
  std::atomic<uint32_t> active_{0};   // workers inside a job
  std::atomic<uint32_t> sleepers_{0};
  std::atomic<bool> stop_{false};
  // A slot's range of the job's blocks: [next, end), next advanced by whoever takes one.
  struct alignas(64) Range {
    std::atomic<uint64_t> next{0};
    uint64_t end = 0;
  };
  std::vector<Range> ranges_;  // one per slot; rewritten only while no worker is active
  std::atomic<uint64_t> done_{0};
  TaskFn fn_ = nullptr;  // written only while the generation is odd and no worker is active
  void* context_ = nullptr;

  std::mutex sleep_mutex_;
  std::condition_variable wake_;
};

}  // namespace metrale::cpu
