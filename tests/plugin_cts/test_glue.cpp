// SPDX-License-Identifier: MIT OR Apache-2.0
// runtime/abi/metrale/plugin_glue.h on its own: bounded error buffers, the per-thread last-error
// slot, the handshake, the launch checks, the live-range table and the C++ exception guard. (It
// compiles as C in the vendor example and the minimal plugin, which the plugin conformance suite runs.)
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <metrale/plugin_glue.h>

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>

TEST_CASE("write_error and format_error: NUL-terminated, truncated, nothing written past size") {
  std::array<char, 16> buffer;
  buffer.fill('#');
  metrale_glue_write_error(buffer.data(), 6, "a long message");
  CHECK(std::string(buffer.data()) == "a lon");
  CHECK(buffer[6] == '#');
  metrale_glue_write_error(buffer.data(), buffer.size(), nullptr);
  CHECK(std::string(buffer.data()).empty());
  metrale_glue_write_error(nullptr, 10, "ignored");
  buffer.fill('#');
  metrale_glue_write_error(buffer.data(), 0, "ignored");
  CHECK(buffer[0] == '#');
  metrale_glue_format_error(buffer.data(), 8, "%s=%d", "threads", 12);
  CHECK(std::string(buffer.data()) == "threads");
  CHECK(buffer[8] == '#');
}

TEST_CASE("error slot: empty until a failure, per instance, per thread; a new slot starts clean") {
  metrale_glue_error_slot a, b;
  metrale_glue_error_init(&a);
  metrale_glue_error_init(&b);
  CHECK(std::string(metrale_glue_last_error(&a)).empty());
  CHECK(metrale_glue_fail(&a, METRALE_STATUS_NOT_FOUND, "no kernel %s", "x/y") == METRALE_STATUS_NOT_FOUND);
  CHECK(std::string(metrale_glue_last_error(&a)) == "no kernel x/y");
  CHECK(std::string(metrale_glue_last_error(&b)).empty());
  std::string other = "unset";
  std::thread([&] { other = metrale_glue_last_error(&a); }).join();
  CHECK(other.empty());
  metrale_glue_fail(&a, METRALE_STATUS_INTERNAL, "second");
  CHECK(std::string(metrale_glue_last_error(&a)) == "second");
  CHECK(std::string(metrale_glue_last_error(nullptr)).empty());

  const metrale_glue_error_slot old = a;
  metrale_glue_error_init(&a);  // an instance at the same address later: no stale message
  CHECK(std::string(metrale_glue_last_error(&a)).empty());
  CHECK(a.id != old.id);

  SUBCASE("a thread keeps the last METRALE_GLUE_ERROR_RECORDS instances' messages") {
    std::array<metrale_glue_error_slot, METRALE_GLUE_ERROR_RECORDS + 1> many;
    for (size_t i = 0; i < many.size(); ++i) {
      metrale_glue_error_init(&many[i]);
      metrale_glue_fail(&many[i], METRALE_STATUS_INTERNAL, "failure %zu", i);
    }
    CHECK(std::string(metrale_glue_last_error(&many[0])).empty());  // the oldest went
    for (size_t i = 1; i < many.size(); ++i)
      CHECK(std::string(metrale_glue_last_error(&many[i])) == "failure " + std::to_string(i));
  }
  SUBCASE("a long message is cut at the capacity") {
    const std::string long_text(3 * METRALE_GLUE_ERROR_CAPACITY, 'z');
    metrale_glue_fail(&b, METRALE_STATUS_INTERNAL, "%s", long_text.c_str());
    CHECK(std::string(metrale_glue_last_error(&b)).size() == METRALE_GLUE_ERROR_CAPACITY - 1);
  }
}

TEST_CASE("handshake: the version, the table, and every refusal") {
  const metrale_plugin_table own{};
  uint32_t chosen = 0;
  const metrale_plugin_table* table = nullptr;
  CHECK(metrale_glue_handshake(2, &own, 1, 3, &chosen, &table) == METRALE_STATUS_OK);
  CHECK(chosen == 2);
  CHECK(table == &own);
  CHECK(metrale_glue_handshake(2, &own, 3, 5, &chosen, &table) == METRALE_STATUS_INCOMPATIBLE);
  CHECK(table == nullptr);
  chosen = 0;
  CHECK(metrale_glue_handshake(2, &own, 0, 1, &chosen, &table) == METRALE_STATUS_INCOMPATIBLE);
  CHECK(chosen == 2);
  CHECK(metrale_glue_handshake(2, &own, 3, 1, &chosen, &table) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(metrale_glue_handshake(2, &own, 1, 3, nullptr, &table) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(table == nullptr);
  CHECK(metrale_glue_handshake(2, &own, 1, 3, &chosen, nullptr) == METRALE_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("check_launch: config, argument count and array, grid and block") {
  uint64_t a = 0, b = 0;
  void* args[] = {&a, &b};
  metrale_launch_config config{{1, 1, 1}, {32, 1, 1}, 0, 0};
  std::array<char, 128> why{};
  CHECK(metrale_glue_check_launch(&config, args, 2, 2, why.data(), why.size()) == METRALE_STATUS_OK);
  CHECK(metrale_glue_check_launch(nullptr, args, 2, 2, why.data(), why.size()) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(why.data()) == "the launch config is NULL");
  CHECK(metrale_glue_check_launch(&config, args, 1, 2, why.data(), why.size()) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(why.data()) == "the kernel takes 2 arguments, got 1");
  CHECK(metrale_glue_check_launch(&config, nullptr, 2, 2, why.data(), why.size()) == METRALE_STATUS_INVALID_ARGUMENT);
  args[1] = nullptr;
  CHECK(metrale_glue_check_launch(&config, args, 2, 2, why.data(), why.size()) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(why.data()) == "argument 1 points to NULL");
  CHECK(metrale_glue_check_launch(&config, nullptr, 0, 0, why.data(), why.size()) == METRALE_STATUS_OK);
  config.block[2] = 0;
  CHECK(metrale_glue_check_launch(&config, nullptr, 0, 0, why.data(), why.size()) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(why.data()).find("block (32, 1, 0)") != std::string::npos);
}

TEST_CASE("table: ranges added, covered and removed; ids from 1") {
  metrale_glue_table t;
  metrale_glue_table_init(&t);
  for (uint64_t i = 0; i < 40; ++i) REQUIRE(metrale_glue_table_add(&t, 0x1000 * (i + 1), 0x100));  // grows past 16
  CHECK(metrale_glue_table_covers(&t, 0x1000, 0x100));
  CHECK(metrale_glue_table_covers(&t, 0x10ff, 1));
  CHECK(metrale_glue_table_covers(&t, 0x1100, 0));  // an empty range at the end
  CHECK_FALSE(metrale_glue_table_covers(&t, 0x10ff, 2));
  CHECK_FALSE(metrale_glue_table_covers(&t, 0xfff, 1));
  CHECK_FALSE(metrale_glue_table_covers(&t, 0x1000, UINT64_MAX));  // no wrap-around
  CHECK(metrale_glue_table_remove(&t, 0x2000));
  CHECK_FALSE(metrale_glue_table_remove(&t, 0x2000));
  CHECK_FALSE(metrale_glue_table_remove(&t, 0x3001));
  CHECK_FALSE(metrale_glue_table_covers(&t, 0x2000, 1));
  CHECK(metrale_glue_table_covers(&t, 0x28000, 0x100));  // the last one, moved by the removal
  CHECK(t.count == 39);
  CHECK(metrale_glue_table_new_id(&t) == 1);
  CHECK(metrale_glue_table_new_id(&t) == 2);
  metrale_glue_table_destroy(&t);
}

TEST_CASE("guard: the body's status, or any exception as a status and a message") {
  metrale_glue_error_slot slot;
  metrale_glue_error_init(&slot);
  CHECK(metrale_glue_guard(&slot, "get_kernel", [] { return METRALE_STATUS_NOT_FOUND; }) == METRALE_STATUS_NOT_FOUND);
  CHECK(metrale_glue_guard(&slot, "launch", []() -> metrale_status { throw std::runtime_error("boom"); }) ==
        METRALE_STATUS_INTERNAL);
  CHECK(std::string(metrale_glue_last_error(&slot)) == "launch: boom");
  CHECK(metrale_glue_guard(&slot, "mem_alloc", []() -> metrale_status { throw std::bad_alloc(); }) ==
        METRALE_STATUS_OUT_OF_MEMORY);
  CHECK(std::string(metrale_glue_last_error(&slot)) == "mem_alloc: out of host memory");
  CHECK(metrale_glue_guard(&slot, "create", []() -> metrale_status { throw 42; }) == METRALE_STATUS_INTERNAL);
  CHECK(std::string(metrale_glue_last_error(&slot)) == "create: unknown exception");
  // A report that throws itself: the status alone.
  auto throwing_report = [](metrale_status, const char*) -> metrale_status { throw std::bad_alloc(); };
  CHECK(metrale_glue_guard(throwing_report, []() -> metrale_status { throw std::logic_error("x"); }) ==
        METRALE_STATUS_INTERNAL);
  CHECK(metrale_glue_guard(throwing_report, []() -> metrale_status { throw std::bad_alloc(); }) ==
        METRALE_STATUS_OUT_OF_MEMORY);
}
