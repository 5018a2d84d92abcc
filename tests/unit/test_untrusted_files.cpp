// SPDX-License-Identifier: MIT OR Apache-2.0
// The runtime's readers for files from outside: RegularFile (regular files only, bounded reads)
// and the bounded JSON reader (depth, duplicate keys, messages with positions).
#include <doctest/doctest.h>

#include <metrale/json_file.hpp>
#include <metrale/regular_file.hpp>
#include <metrale/status.hpp>

#include "test_support.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

using namespace metrale;
using metrale::testing::TempDir;
using metrale::testing::write_file;
namespace fs = std::filesystem;

namespace {

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("RegularFile: reads regular files, refuses everything else by name and kind") {
  TempDir dir;
  const fs::path file = write_file(dir / "a.txt", "hello");
  RegularFile f(file, "test file");
  CHECK(f.size() == 5);
  std::array<std::byte, 3> three{};
  f.read_at(1, three);
  CHECK(std::to_integer<char>(three[0]) == 'e');
  CHECK(has(error_of([&] { f.read_at(4, three); }), "ended after 5 bytes"));
  CHECK(f.read_all(5) == "hello");
  CHECK(has(error_of([&] { (void)f.read_all(4); }), file.string() + ": cannot read the test file: it is 5 bytes, more "
                                                                      "than the 4 bytes allowed"));
  CHECK(read_regular_file(write_file(dir / "empty", ""), "x", 0).empty());

  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  CHECK(has(error_of([&] { RegularFile(dir / "fifo", "test file"); }), "it is a FIFO (named pipe), not a regular file"));
  CHECK(has(error_of([&] { RegularFile(dir.path(), "test file"); }), "it is a directory, not a regular file"));
  CHECK(has(error_of([&] { RegularFile("/dev/null", "test file"); }), "/dev/null: cannot read the test file: it is a "
                                                                        "character device"));
  CHECK(has(error_of([&] { RegularFile(dir / "absent", "test file"); }), "No such file"));

  // A socket cannot even be opened: the message still says what it is.
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock = (dir / "sock").string();
  if (sock.size() < sizeof(addr.sun_path)) {
    std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
    REQUIRE(::bind(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
    CHECK(has(error_of([&] { RegularFile(sock, "test file"); }), "it is a socket"));
  }
  ::close(s);
  CHECK(size_limit_text(4u << 20) == "4 MiB");
  CHECK(size_limit_text(1500) == "1500 bytes");
}

TEST_CASE("parse_json: positions, depth, duplicates and overflow are errors naming the source") {
  CHECK(parse_json(R"({"a": [1, {"b": null}]})", "doc")["a"][1].contains("b"));
  CHECK(parse_json(std::string(64, '[') + std::string(64, ']'), "doc").is_array());
  CHECK(has(error_of([] { parse_json(std::string(65, '[') + std::string(65, ']'), "doc"); }),
            "doc: not valid JSON (line 1, column 65): nested deeper than 64 levels"));
  // Brackets inside strings do not count.
  CHECK(parse_json("[\"" + std::string(100, '[') + "\\\"[\"]", "doc").size() == 1);
  CHECK(has(error_of([] { parse_json("{\n \"a\": 1,\n \"a\": 2}", "doc"); }), "doc: /a: key \"a\" appears twice"));
  CHECK(has(error_of([] { parse_json(R"({"x": {"a": 1, "a": 2}})", "doc"); }), "doc: /x/a: key \"a\" appears twice"));
  CHECK(has(error_of([] { parse_json(R"({"n": 1e999})", "doc"); }), "doc: not valid JSON (line 1, column"));
  CHECK(has(error_of([] { parse_json("", "doc"); }), "doc: not valid JSON (line 1, column 1)"));
  TempDir dir;
  write_file(dir / "big.json", std::string(100, ' ') + "{}");
  CHECK(has(error_of([&] { read_json_file(dir / "big.json", "test document", 64); }), "more than the 64 bytes allowed"));
}

TEST_CASE("json_unsigned and describe_json never convert or dump large values") {
  CHECK(json_unsigned(nlohmann::json(5)) == 5u);
  CHECK(json_unsigned(nlohmann::json::parse("18446744073709551615")) == UINT64_MAX);
  CHECK_FALSE(json_unsigned(nlohmann::json(-1)));
  CHECK_FALSE(json_unsigned(nlohmann::json(1e300)));
  CHECK_FALSE(json_unsigned(nlohmann::json(2.0)));
  CHECK_FALSE(json_unsigned(nlohmann::json("3")));
  CHECK(describe_json(nlohmann::json(1.9)) == "number 1.9");
  CHECK(describe_json(nlohmann::json::object()) == "an object");
  CHECK(describe_json(nlohmann::json()) == "null");  // not "null null"
  CHECK(describe_json(nlohmann::json(std::string(1000, 'x'))).size() < 60);
}
