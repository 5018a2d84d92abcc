// SPDX-License-Identifier: MIT OR Apache-2.0
// The fiber scheduler behind metrale_cuda_emulation.hpp and the PTX primitives of
// metrale_emulated_ptx.hpp. Single OS thread: one fiber per CUDA thread, one block at a time.
#include "metrale_emulated_ptx.hpp"

#include <ucontext.h>

#include <array>
#include <deque>
#include <map>
#include <memory>
#include <vector>

namespace emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kSlotBytes = kWarpSlotBytes;  // per-lane deposit of a warp collective

struct Copy {
  void* dst;
  const void* src;
  size_t bytes;
  bool valid;
  void perform() const {
    if (valid) std::memcpy(dst, src, bytes);
    else std::memset(dst, 0, bytes);
  }
};

enum class Wait { none, block, warp, poll };

struct Fiber {
  ucontext_t context{};
  std::unique_ptr<char[]> stack;
  dim3 tid;
  unsigned warp = 0;
  unsigned lane = 0;
  bool done = false;
  Wait wait = Wait::none;
  uint64_t wait_generation = 0;
  std::vector<Copy> open_group;             // cp.async issued since the last commit
  std::deque<std::vector<Copy>> committed;  // committed groups, oldest first
};

struct WarpState {
  unsigned live = 0;
  unsigned arrived = 0;
  uint64_t generation = 0;
  // Double-buffered by generation parity: a lane that leaves a collective early can only reach
  // the next one, which uses the other buffer.
  std::array<std::array<std::array<unsigned char, kSlotBytes>, 32>, 2> in{};
  std::array<std::array<std::array<unsigned char, kSlotBytes>, 32>, 2> out{};
};

struct Barrier {
  unsigned expected = 0;
  unsigned pending = 0;
  int64_t tx = 0;
  unsigned phase = 0;
  std::vector<Copy> copies;  // bulk copies not landed yet (deferred policy)
};

struct Failure {
  std::string what;
};

struct State {
  dim3 grid;
  dim3 block;
  dim3 block_idx;
  std::vector<Fiber> fibers;
  ucontext_t scheduler{};
  Fiber* current = nullptr;
  unsigned live = 0;
  unsigned arrived = 0;
  uint64_t generation = 0;
  std::vector<WarpState> warps;
  std::map<unsigned long long*, Barrier> barriers;
  uint64_t progress = 0;
  std::string failure;
  const std::function<void()>* body = nullptr;
  AsyncPolicy policy = AsyncPolicy::deferred;
  Schedule schedule = Schedule::round_robin;
};

State g;

Fiber& current() {
  if (g.current == nullptr) throw std::logic_error("CUDA emulation: device function called outside a launch");
  return *g.current;
}

[[noreturn]] void fail(const std::string& what) { throw Failure{what}; }

void yield() {
  Fiber& f = current();
  swapcontext(&f.context, &g.scheduler);
}

void release_block_if_complete() {
  if (g.arrived > 0 && g.arrived == g.live) {
    g.arrived = 0;
    ++g.generation;
    note_progress();
  }
}

void release_warp_if_complete(WarpState& w, const std::function<void(const unsigned char*, unsigned char*)>* combine) {
  if (w.arrived == 0 || w.arrived != w.live) return;
  if (w.live != 32) fail("warp-synchronous operation with only " + std::to_string(w.live) + " live lanes");
  const unsigned slot = w.generation & 1u;
  if (combine != nullptr) (*combine)(&w.in[slot][0][0], &w.out[slot][0][0]);
  w.arrived = 0;
  ++w.generation;
  note_progress();
}

void finish(Fiber& f) {
  f.done = true;
  --g.live;
  --g.warps[f.warp].live;
  note_progress();
  release_block_if_complete();
  // A warp collective cannot complete on an exit: all 32 lanes must take part in one.
}

void fiber_main() {
  Fiber& f = current();
  try {
    (*g.body)();
  } catch (const Failure& e) {
    g.failure = e.what;
  } catch (const std::exception& e) {
    g.failure = e.what();
  }
  finish(f);
  swapcontext(&f.context, &g.scheduler);
}

bool runnable(const Fiber& f) {
  switch (f.wait) {
    case Wait::none: return !f.done;
    case Wait::block: return g.generation != f.wait_generation;
    case Wait::warp: return g.warps[f.warp].generation != f.wait_generation;
    case Wait::poll: return g.progress != f.wait_generation;  // only after something changed
  }
  return false;
}

std::string where() {
  return " in block (" + std::to_string(g.block_idx.x) + "," + std::to_string(g.block_idx.y) + "," +
         std::to_string(g.block_idx.z) + ")";
}

void run_block() {
  const unsigned threads = g.block.x * g.block.y * g.block.z;
  g.live = threads;
  g.arrived = 0;
  g.generation = 0;
  g.warps.assign((threads + 31) / 32, WarpState{});
  for (unsigned i = 0; i < threads; ++i) {
    Fiber& f = g.fibers[i];
    f.tid = {i % g.block.x, (i / g.block.x) % g.block.y, i / (g.block.x * g.block.y)};
    f.warp = i / 32;
    f.lane = i % 32;
    f.done = false;
    f.wait = Wait::none;
    f.open_group.clear();
    f.committed.clear();
    ++g.warps[f.warp].live;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, &fiber_main, 0);
  }
  size_t cursor = threads - 1;
  for (;;) {
    Fiber* next = nullptr;
    for (size_t step = 0; step < threads && next == nullptr; ++step) {
      size_t i = 0;
      switch (g.schedule) {
        case Schedule::round_robin: i = (cursor + 1 + step) % threads; break;
        case Schedule::lowest_first: i = step; break;
        case Schedule::highest_first: i = threads - 1 - step; break;
      }
      if (runnable(g.fibers[i])) {
        next = &g.fibers[i];
        cursor = i;
      }
    }
    if (next == nullptr) {
      if (g.live == 0) return;
      unsigned at_block = 0, at_warp = 0, polling = 0;
      for (unsigned i = 0; i < threads; ++i) {
        const Fiber& f = g.fibers[i];
        if (f.done) continue;
        at_block += f.wait == Wait::block;
        at_warp += f.wait == Wait::warp;
        polling += f.wait == Wait::poll;
      }
      throw std::runtime_error("CUDA emulation: deadlock" + where() + ": of " + std::to_string(g.live) +
                               " live threads, " + std::to_string(at_block) + " wait at __syncthreads, " +
                               std::to_string(at_warp) + " at a warp collective, " + std::to_string(polling) +
                               " poll an mbarrier that never completes");
    }
    next->wait = Wait::none;
    g.current = next;
    swapcontext(&g.scheduler, &next->context);
    g.current = nullptr;
    if (!g.failure.empty()) throw std::runtime_error("CUDA emulation: " + g.failure + where());
  }
}

void complete_if_done(Barrier& b) {
  if (b.pending == 0 && b.tx == 0) {
    b.phase ^= 1u;
    b.pending = b.expected;
    note_progress();
  }
}

Barrier& barrier_at(unsigned long long* bar) {
  auto it = g.barriers.find(bar);
  if (it == g.barriers.end()) fail("mbarrier used before mbarrier.init");
  return it->second;
}

}  // namespace

const dim3& thread_idx() { return current().tid; }
const dim3& block_idx() { return g.block_idx; }
const dim3& block_dim() { return g.block; }
const dim3& grid_dim() { return g.grid; }
unsigned lane_id() { return current().lane; }
void note_progress() { ++g.progress; }
void set_async_policy(AsyncPolicy policy) { g.policy = policy; }
void set_schedule(Schedule schedule) { g.schedule = schedule; }
AsyncPolicy async_policy() { return g.policy; }
[[noreturn]] void trap() { fail("__trap() (kernel refused its launch configuration)"); }

void syncthreads() {
  Fiber& f = current();
  const uint64_t generation = g.generation;
  ++g.arrived;
  release_block_if_complete();
  if (g.generation != generation) return;
  f.wait = Wait::block;
  f.wait_generation = generation;
  yield();
}

void warp_collective(const void* in, size_t in_bytes, void* out, size_t out_bytes,
                     const std::function<void(const unsigned char*, unsigned char*)>& combine) {
  if (in_bytes > kSlotBytes || out_bytes > kSlotBytes) throw std::logic_error("warp collective deposit too large");
  Fiber& f = current();
  WarpState& w = g.warps[f.warp];
  const uint64_t generation = w.generation;
  const unsigned slot = generation & 1u;
  std::memcpy(w.in[slot][f.lane].data(), in, in_bytes);
  ++w.arrived;
  // The deposits are laid out lane after lane, kSlotBytes apart.
  const std::function<void(const unsigned char*, unsigned char*)> strided = combine;
  release_warp_if_complete(w, &strided);
  if (w.generation == generation) {
    f.wait = Wait::warp;
    f.wait_generation = generation;
    yield();
  }
  std::memcpy(out, w.out[slot][f.lane].data(), out_bytes);
}

uint32_t shfl_xor(uint32_t value, int mask) {
  uint32_t result = 0;
  warp_collective(&value, sizeof(value), &result, sizeof(result), [mask](const unsigned char* in, unsigned char* out) {
    for (unsigned lane = 0; lane < 32; ++lane) {
      std::memcpy(out + lane * kSlotBytes, in + ((lane ^ static_cast<unsigned>(mask)) & 31u) * kSlotBytes, 4);
    }
  });
  return result;
}

void syncwarp() {
  unsigned char none = 0;
  warp_collective(&none, 1, &none, 1, [](const unsigned char*, unsigned char*) {});
}

unsigned match_any(uint32_t value) {
  unsigned result = 0;
  warp_collective(&value, sizeof(value), &result, sizeof(result), [](const unsigned char* in, unsigned char* out) {
    uint32_t values[32];
    for (unsigned lane = 0; lane < 32; ++lane) std::memcpy(&values[lane], in + lane * kSlotBytes, 4);
    for (unsigned lane = 0; lane < 32; ++lane) {
      unsigned mask = 0;
      for (unsigned other = 0; other < 32; ++other) mask |= (values[other] == values[lane] ? 1u : 0u) << other;
      std::memcpy(out + lane * kSlotBytes, &mask, 4);
    }
  });
  return result;
}

void poll_yield() {
  Fiber& f = current();
  f.wait = Wait::poll;
  f.wait_generation = g.progress;  // runnable again once another thread changes something
  yield();
}

void launch(dim3 grid, dim3 block, const std::function<void()>& body) {
  const unsigned threads = block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0) {
    throw std::invalid_argument("CUDA emulation: invalid launch shape");
  }
  g.grid = grid;
  g.block = block;
  g.body = &body;
  g.failure.clear();
  g.barriers.clear();
  if (g.fibers.size() < threads) g.fibers.resize(threads);
  for (auto& f : g.fibers) {
    if (!f.stack) f.stack = std::make_unique<char[]>(kStackBytes);
  }
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        g.block_idx = {x, y, z};
        run_block();
      }
    }
  }
  g.body = nullptr;
}

// ---- PTX primitives ----

void cp_async(void* dst, const void* src, bool valid) {
  const Copy copy{dst, src, 16, valid};
  if (g.policy == AsyncPolicy::eager) copy.perform();
  else current().open_group.push_back(copy);
}

void cp_async_commit() {
  Fiber& f = current();
  f.committed.push_back(std::move(f.open_group));
  f.open_group.clear();
}

void cp_async_wait(int pending) {
  Fiber& f = current();
  while (f.committed.size() > static_cast<size_t>(pending)) {
    for (const Copy& c : f.committed.front()) c.perform();
    f.committed.pop_front();
  }
}

namespace {

float bf16_half(unsigned reg, unsigned half) {
  return std::bit_cast<float>(half == 0 ? reg << 16 : reg & 0xffff0000u);
}

struct MmaDeposit {
  unsigned a[4];
  unsigned b[2];
  float c[4];
};

}  // namespace

void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  MmaDeposit mine{};
  std::memcpy(mine.a, a, sizeof(mine.a));
  std::memcpy(mine.b, b, sizeof(mine.b));
  std::memcpy(mine.c, d, sizeof(mine.c));
  float result[4] = {};
  warp_collective(&mine, sizeof(mine), result, sizeof(result), [](const unsigned char* in, unsigned char* out) {
    // Matrices rebuilt from the lanes' fragments with the PTX ISA's formulas for
    // mma.m16n8k16 .bf16 (groupID = lane >> 2, threadID_in_group = lane % 4).
    float A[16][16] = {};
    float B[16][8] = {};
    float C[16][8] = {};
    for (unsigned lane = 0; lane < 32; ++lane) {
      MmaDeposit dep;
      std::memcpy(&dep, in + lane * kSlotBytes, sizeof(dep));
      const unsigned group = lane >> 2;
      const unsigned tig = lane % 4;
      for (unsigned i = 0; i < 8; ++i) {
        const unsigned row = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
        const unsigned col = tig * 2 + (i & 1u) + (i >= 4 ? 8 : 0);
        A[row][col] = bf16_half(dep.a[i / 2], i & 1u);
      }
      for (unsigned i = 0; i < 4; ++i) {
        const unsigned row = tig * 2 + (i & 1u) + (i >= 2 ? 8 : 0);
        B[row][group] = bf16_half(dep.b[i / 2], i & 1u);
      }
      for (unsigned i = 0; i < 4; ++i) C[group + (i >= 2 ? 8 : 0)][tig * 2 + (i & 1u)] = dep.c[i];
    }
    for (unsigned lane = 0; lane < 32; ++lane) {
      const unsigned group = lane >> 2;
      const unsigned tig = lane % 4;
      float d_lane[4];
      for (unsigned i = 0; i < 4; ++i) {
        const unsigned row = group + (i >= 2 ? 8 : 0);
        const unsigned col = tig * 2 + (i & 1u);
        float acc = C[row][col];
        for (unsigned k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
        d_lane[i] = acc;
      }
      std::memcpy(out + lane * kSlotBytes, d_lane, sizeof(d_lane));
    }
  });
  std::memcpy(d, result, sizeof(result));
}

void ldmatrix_x4_trans(unsigned (&r)[4], const void* row) {
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) fail("ldmatrix: a row address not 16-byte aligned");
  unsigned result[4] = {};
  warp_collective(&row, sizeof(row), result, sizeof(result), [](const unsigned char* in, unsigned char* out) {
    // Lane l gave row l % 8 of matrix l / 8; with .trans lane l receives, per matrix q, the
    // elements (2(l%4), l/4) and (2(l%4) + 1, l/4), the first in the low half (PTX ISA, ldmatrix).
    const uint16_t* rows[32];
    for (unsigned lane = 0; lane < 32; ++lane) std::memcpy(&rows[lane], in + lane * kSlotBytes, sizeof(rows[lane]));
    for (unsigned lane = 0; lane < 32; ++lane) {
      unsigned regs[4];
      for (unsigned q = 0; q < 4; ++q) {
        const unsigned first = 8 * q + 2 * (lane % 4);
        regs[q] = rows[first][lane / 4] | static_cast<unsigned>(rows[first + 1][lane / 4]) << 16;
      }
      std::memcpy(out + lane * kSlotBytes, regs, sizeof(regs));
    }
  });
  std::memcpy(r, result, sizeof(result));
}

void mbarrier_init(unsigned long long* bar, unsigned count) {
  Barrier b;
  b.expected = count;
  b.pending = count;
  g.barriers[bar] = std::move(b);
  *bar = 0;
}

void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  Barrier& b = barrier_at(bar);
  if (b.pending == 0) fail("mbarrier arrival beyond its expected count");
  b.tx += bytes;
  --b.pending;
  note_progress();
  complete_if_done(b);
}

void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  if (bytes % 16 != 0 || reinterpret_cast<uintptr_t>(dst) % 16 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0) {
    fail("cp.async.bulk needs 16-byte aligned addresses and a multiple of 16 bytes");
  }
  Barrier& b = barrier_at(bar);
  const Copy copy{dst, src, bytes, true};
  if (g.policy == AsyncPolicy::eager) {
    copy.perform();
    b.tx -= bytes;
    complete_if_done(b);
  } else {
    b.copies.push_back(copy);
  }
}

void mbarrier_wait(unsigned long long* bar, unsigned parity) {
  for (;;) {
    Barrier& b = barrier_at(bar);
    if (!b.copies.empty()) {
      // Deferred copies land no later than someone needs them.
      std::vector<Copy> copies;
      copies.swap(b.copies);
      for (const Copy& c : copies) {
        c.perform();
        b.tx -= static_cast<int64_t>(c.bytes);
      }
      note_progress();
      complete_if_done(b);
    }
    if ((b.phase & 1u) != (parity & 1u)) return;  // the phase of that parity has completed
    poll_yield();
  }
}

}  // namespace emu
