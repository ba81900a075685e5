// Console output to a file under ConsoleConfig::max_bytes: a guest that
// writes forever fills at most that much disk, and the newest output stays.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "vmm/config.hpp"
#include "vmm/console.hpp"

using namespace sbx;

namespace {

struct Dir {
    Dir() {
        char tmpl[] = "/tmp/sbx-console-XXXXXX";
        REQUIRE(::mkdtemp(tmpl) != nullptr);
        path = tmpl;
    }
    ~Dir() { (void)std::system(("rm -rf " + path).c_str()); }
    std::string path;
};

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

std::uint64_t size_of(const std::string& path) {
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return static_cast<std::uint64_t>(st.st_size);
}

}  // namespace

TEST_CASE("a bounded console file keeps the newest output under its bound") {
    Dir dir;
    const std::string log = dir.path + "/console.log";
    auto config = ConsoleConfig::parse("append:" + log);
    REQUIRE(config);
    config->max_bytes = 8192;
    auto console = Console::open(*config);
    REQUIRE(console);
    CHECK(console->pollable_output_fd() == -1);  // a regular file never blocks
    std::string all;
    for (int i = 0; i < 5000; ++i) {
        const std::string line = fmt::format("line {}\n", i);
        CHECK(console->write_some(line) == line.size());
        all += line;
        REQUIRE(size_of(log) <= 8192);
    }
    const std::string kept = slurp(log);
    const auto note_end = kept.find('\n') + 1;
    const std::string note = kept.substr(0, note_end);
    const std::string tail = kept.substr(note_end);
    CHECK(note.starts_with("[sbx-vmm: the console log is kept under 8192 bytes: "));
    // The rest is exactly the newest output, and the note counts the rest.
    REQUIRE(tail.size() >= 4096);
    CHECK(all.ends_with(tail));
    CHECK(note.find(fmt::format(": {} older bytes", all.size() - tail.size())) != std::string::npos);
    CHECK(tail.ends_with("line 4999\n"));
}

TEST_CASE("a bounded console appends to what the file holds, and cuts it when it is already too big") {
    Dir dir;
    const std::string log = dir.path + "/console.log";
    std::ofstream(log) << std::string(20000, 'o');
    auto config = ConsoleConfig::parse("append:" + log);
    REQUIRE(config);
    config->max_bytes = 100;  // raised to ConsoleConfig::kMinMaxBytes
    {
        auto console = Console::open(*config);
        REQUIRE(console);
        console->write_some("new\n");
    }
    const std::string kept = slurp(log);
    CHECK(kept.size() <= ConsoleConfig::kMinMaxBytes);
    CHECK(kept.starts_with("[sbx-vmm: the console log is kept under 4096 bytes: 17956 older bytes"));
    CHECK(kept.ends_with(std::string(2044, 'o') + "new\n"));
}

TEST_CASE("an unbounded console file grows with the output") {
    Dir dir;
    const std::string log = dir.path + "/console.log";
    auto config = ConsoleConfig::parse("file:" + log);
    REQUIRE(config);
    auto console = Console::open(*config);
    REQUIRE(console);
    const std::string block(64 * 1024, 'x');
    for (int i = 0; i < 4; ++i) {
        console->write_some(block);
    }
    CHECK(size_of(log) == 4 * block.size());
}
