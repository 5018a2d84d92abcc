// SPDX-License-Identifier: MIT OR Apache-2.0
// Device memory and streams through the raw table: allocation and free (zero bytes, double free,
// unknown addresses, exhaustion), copies and memset round trips, ranges checked before anything is
// touched, streams and the default stream, and memory traffic from many threads at once.
#include "cts.hpp"

#include <latch>
#include <numeric>
#include <thread>

namespace {

// An allocation of the shared instance, freed at scope exit unless freed already.
class Block {
 public:
  Block(cts::Instance& d, size_t bytes) : d_(d) {
    REQUIRE(d.t().mem_alloc(d.raw(), bytes, &address_) == METRALE_STATUS_OK);
    REQUIRE(address_ != 0);
  }
  ~Block() {
    if (address_ != 0) d_.t().mem_free(d_.raw(), address_);
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  uint64_t address() const { return address_; }
  void forget() { address_ = 0; }

 private:
  cts::Instance& d_;
  uint64_t address_ = 0;
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + seed);
  return bytes;
}

std::vector<uint8_t> download(cts::Instance& d, uint64_t address, size_t n, uint64_t stream = 0) {
  std::vector<uint8_t> bytes(n);
  REQUIRE(d.t().copy_to_host(d.raw(), bytes.data(), address, n, stream) == METRALE_STATUS_OK);
  REQUIRE(d.t().stream_synchronize(d.raw(), stream) == METRALE_STATUS_OK);
  return bytes;
}

}  // namespace

TEST_CASE("mem_alloc and mem_free: distinct nonzero addresses; double and unknown frees are not found") {
  cts::Instance* d = cts::device("memory: alloc and free");
  if (d == nullptr) return;
  const auto& t = d->t();
  uint64_t a = 0, b = 0;
  REQUIRE(t.mem_alloc(d->raw(), 100, &a) == METRALE_STATUS_OK);
  REQUIRE(t.mem_alloc(d->raw(), 3, &b) == METRALE_STATUS_OK);
  CHECK(a != 0);
  CHECK(b != 0);
  CHECK(a != b);
  CTS_CHECK_FAILS(*d, t.mem_free(d->raw(), a + 1), METRALE_STATUS_NOT_FOUND);  // inside, not at the start
  CHECK(t.mem_free(d->raw(), a) == METRALE_STATUS_OK);
  CTS_CHECK_FAILS(*d, t.mem_free(d->raw(), a), METRALE_STATUS_NOT_FOUND);  // twice
  CHECK(t.mem_free(d->raw(), b) == METRALE_STATUS_OK);
  const metrale_status zero = t.mem_free(d->raw(), 0);
  CHECK_MESSAGE((zero == METRALE_STATUS_OK || zero == METRALE_STATUS_NOT_FOUND), "mem_free(0) answered " << cts::status_name(zero));
  CTS_CHECK_FAILS(*d, t.mem_alloc(d->raw(), 8, nullptr), METRALE_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("mem_alloc of 0 bytes: a distinct address mem_free takes, or INVALID_ARGUMENT; never OK with 0") {
  cts::Instance* d = cts::device("memory: zero bytes");
  if (d == nullptr) return;
  uint64_t z = 77, other = 0;
  const metrale_status s = d->t().mem_alloc(d->raw(), 0, &z);
  if (s == METRALE_STATUS_INVALID_ARGUMENT) {
    CHECK(z == 0);
    cts::check_last_error_set(*d, "mem_alloc(0)");
    return;
  }
  REQUIRE_MESSAGE(s == METRALE_STATUS_OK, "mem_alloc(0) answered " << cts::status_name(s));
  CHECK(z != 0);
  REQUIRE(d->t().mem_alloc(d->raw(), 0, &other) == METRALE_STATUS_OK);
  CHECK(other != z);
  CHECK(d->t().copy_to_device(d->raw(), z, nullptr, 0, 0) == METRALE_STATUS_OK);
  CHECK(d->t().mem_free(d->raw(), z) == METRALE_STATUS_OK);
  CHECK(d->t().mem_free(d->raw(), other) == METRALE_STATUS_OK);
}

TEST_CASE("mem_alloc beyond what exists is OUT_OF_MEMORY, writing 0") {
  cts::Instance* d = cts::device("memory: exhaustion");
  if (d == nullptr) return;
  uint64_t huge = 77;
  CTS_CHECK_FAILS(*d, d->t().mem_alloc(d->raw(), size_t{1} << 62, &huge), METRALE_STATUS_OUT_OF_MEMORY);
  CHECK(huge == 0);
}

TEST_CASE("copies and memset round-trip, whole and at offsets inside an allocation") {
  cts::Instance* d = cts::device("memory: round trips");
  if (d == nullptr) return;
  const auto& t = d->t();
  Block a(*d, 256), b(*d, 256);
  const auto bytes = pattern(256, 3);
  REQUIRE(t.copy_to_device(d->raw(), a.address(), bytes.data(), 256, 0) == METRALE_STATUS_OK);
  REQUIRE(t.memset_device(d->raw(), b.address(), 0xab, 256, 0) == METRALE_STATUS_OK);
  REQUIRE(t.copy_device(d->raw(), b.address() + 16, a.address() + 32, 64, 0) == METRALE_STATUS_OK);
  REQUIRE(t.memset_device(d->raw(), b.address() + 200, 0x5c, 8, 0) == METRALE_STATUS_OK);
  CHECK(download(*d, a.address(), 256) == bytes);
  const auto back = download(*d, b.address(), 256);
  for (size_t i = 0; i < 256; ++i) {
    uint8_t want = 0xab;
    if (i >= 16 && i < 80) want = bytes[i + 16];
    if (i >= 200 && i < 208) want = 0x5c;
    REQUIRE_MESSAGE(back[i] == want, "byte " << i);
  }
  const auto middle = download(*d, a.address() + 10, 20);  // a range inside, not at the start
  CHECK(std::equal(middle.begin(), middle.end(), bytes.begin() + 10));
  // Zero bytes anywhere inside an allocation do nothing and succeed.
  CHECK(t.copy_to_device(d->raw(), a.address() + 128, bytes.data(), 0, 0) == METRALE_STATUS_OK);
  CHECK(t.copy_to_host(d->raw(), nullptr, a.address(), 0, 0) == METRALE_STATUS_OK);
  CHECK(t.memset_device(d->raw(), a.address(), 0, 0, 0) == METRALE_STATUS_OK);
  CHECK(download(*d, a.address(), 256) == bytes);
}

TEST_CASE("a range outside every live allocation is an invalid argument, refused before anything is written") {
  cts::Instance* d = cts::device("memory: ranges");
  if (d == nullptr) return;
  const auto& t = d->t();
  Block a(*d, 256), b(*d, 64);
  const auto bytes = pattern(300, 9);
  REQUIRE(t.copy_to_device(d->raw(), a.address(), bytes.data(), 256, 0) == METRALE_STATUS_OK);
  std::vector<uint8_t> host(300);
  const uint64_t at = a.address();
  CTS_CHECK_FAILS(*d, t.copy_to_device(d->raw(), at + 1, bytes.data(), 256, 0), METRALE_STATUS_INVALID_ARGUMENT);
  CTS_CHECK_FAILS(*d, t.copy_to_host(d->raw(), host.data(), at + 256, 1, 0), METRALE_STATUS_INVALID_ARGUMENT);
  CTS_CHECK_FAILS(*d, t.copy_to_host(d->raw(), host.data(), at, SIZE_MAX, 0), METRALE_STATUS_INVALID_ARGUMENT);
  CTS_CHECK_FAILS(*d, t.memset_device(d->raw(), at, 0, 257, 0), METRALE_STATUS_INVALID_ARGUMENT);
  CTS_CHECK_FAILS(*d, t.copy_device(d->raw(), b.address(), at, 65, 0), METRALE_STATUS_INVALID_ARGUMENT);
  CTS_CHECK_FAILS(*d, t.copy_device(d->raw(), at, b.address() + 1, 64, 0), METRALE_STATUS_INVALID_ARGUMENT);
  CTS_CHECK_FAILS(*d, t.memset_device(d->raw(), 0, 0, 1, 0), METRALE_STATUS_INVALID_ARGUMENT);
  const uint64_t host_address = reinterpret_cast<uintptr_t>(host.data());  // host memory is not device memory
  CTS_CHECK_FAILS(*d, t.copy_to_device(d->raw(), host_address, bytes.data(), 4, 0), METRALE_STATUS_INVALID_ARGUMENT);
  CTS_CHECK_FAILS(*d, t.copy_to_device(d->raw(), at, nullptr, 4, 0), METRALE_STATUS_INVALID_ARGUMENT);
  CTS_CHECK_FAILS(*d, t.copy_to_host(d->raw(), nullptr, at, 4, 0), METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(download(*d, at, 256) == std::vector<uint8_t>(bytes.begin(), bytes.begin() + 256));  // untouched

  uint64_t gone = 0;
  REQUIRE(t.mem_alloc(d->raw(), 64, &gone) == METRALE_STATUS_OK);
  REQUIRE(t.mem_free(d->raw(), gone) == METRALE_STATUS_OK);
  CTS_CHECK_FAILS(*d, t.copy_to_host(d->raw(), host.data(), gone, 4, 0), METRALE_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("streams: nonzero distinct ids; work on a stream is done at its synchronize; unknown ids are not found") {
  cts::Instance* d = cts::device("streams");
  if (d == nullptr) return;
  const auto& t = d->t();
  uint64_t s1 = 0, s2 = 0;
  REQUIRE(t.stream_create(d->raw(), &s1) == METRALE_STATUS_OK);
  REQUIRE(t.stream_create(d->raw(), &s2) == METRALE_STATUS_OK);
  CHECK(s1 != 0);
  CHECK(s2 != 0);
  CHECK(s1 != s2);
  Block a(*d, 64);
  const auto bytes = pattern(64, 1);
  CHECK(t.copy_to_device(d->raw(), a.address(), bytes.data(), 64, s1) == METRALE_STATUS_OK);
  CHECK(t.memset_device(d->raw(), a.address(), 9, 8, s1) == METRALE_STATUS_OK);
  CHECK(t.stream_synchronize(d->raw(), s1) == METRALE_STATUS_OK);
  const auto back = download(*d, a.address(), 64, s2);
  CHECK(back[0] == 9);
  CHECK(back[7] == 9);
  CHECK(back[8] == bytes[8]);
  CHECK(t.stream_synchronize(d->raw(), 0) == METRALE_STATUS_OK);  // the default stream always exists

  CHECK(t.stream_destroy(d->raw(), s1) == METRALE_STATUS_OK);
  CTS_CHECK_FAILS(*d, t.stream_destroy(d->raw(), s1), METRALE_STATUS_NOT_FOUND);
  CTS_CHECK_FAILS(*d, t.stream_synchronize(d->raw(), s1), METRALE_STATUS_NOT_FOUND);
  CTS_CHECK_FAILS(*d, t.copy_to_device(d->raw(), a.address(), bytes.data(), 4, s1), METRALE_STATUS_NOT_FOUND);
  CTS_CHECK_FAILS(*d, t.memset_device(d->raw(), a.address(), 0, 4, 424242), METRALE_STATUS_NOT_FOUND);
  CTS_CHECK_FAILS(*d, t.stream_destroy(d->raw(), 424242), METRALE_STATUS_NOT_FOUND);
  CTS_CHECK_FAILS(*d, t.stream_destroy(d->raw(), 0), METRALE_STATUS_INVALID_ARGUMENT);
  CTS_CHECK_FAILS(*d, t.stream_create(d->raw(), nullptr), METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(t.stream_destroy(d->raw(), s2) == METRALE_STATUS_OK);
}

TEST_CASE("memory and streams from many threads at once") {
  cts::Instance* d = cts::device("concurrent memory");
  if (d == nullptr) return;
  constexpr size_t kThreads = 8, kRounds = 20;
  std::vector<int> failures(kThreads, 0);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      const auto& t = d->t();
      start.arrive_and_wait();
      for (size_t r = 0; r < kRounds; ++r) {
        const auto bytes = pattern(512, static_cast<uint8_t>(i * 31 + r));
        std::vector<uint8_t> back(512);
        uint64_t p = 0, s = 0;
        bool ok = t.mem_alloc(d->raw(), 512, &p) == METRALE_STATUS_OK && t.stream_create(d->raw(), &s) == METRALE_STATUS_OK;
        ok = ok && t.copy_to_device(d->raw(), p, bytes.data(), 512, s) == METRALE_STATUS_OK;
        ok = ok && t.copy_to_host(d->raw(), back.data(), p, 512, s) == METRALE_STATUS_OK;
        ok = ok && t.stream_synchronize(d->raw(), s) == METRALE_STATUS_OK && back == bytes;
        ok = ok && t.stream_destroy(d->raw(), s) == METRALE_STATUS_OK && t.mem_free(d->raw(), p) == METRALE_STATUS_OK;
        failures[i] += ok ? 0 : 1;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(std::accumulate(failures.begin(), failures.end(), 0) == 0);
}

TEST_CASE("instances are independent: one's addresses and streams are unknown to another") {
  cts::Instance* d = cts::device("independent instances");
  if (d == nullptr) return;
  cts::Instance other;
  REQUIRE_MESSAGE(other.status == METRALE_STATUS_OK, other.create_error);
  Block a(*d, 64);
  uint64_t s = 0;
  REQUIRE(d->t().stream_create(d->raw(), &s) == METRALE_STATUS_OK);
  CTS_CHECK_FAILS(other, other.t().mem_free(other.raw(), a.address()), METRALE_STATUS_NOT_FOUND);
  CTS_CHECK_FAILS(other, other.t().stream_destroy(other.raw(), s), METRALE_STATUS_NOT_FOUND);  // it has none
  CHECK(d->t().stream_destroy(d->raw(), s) == METRALE_STATUS_OK);
  // An instance destroyed with live allocations and streams frees them itself.
  uint64_t left = 0, stream = 0;
  CHECK(other.t().mem_alloc(other.raw(), 128, &left) == METRALE_STATUS_OK);
  CHECK(other.t().stream_create(other.raw(), &stream) == METRALE_STATUS_OK);
}
