// file_read and file_write through a real agent and the real client over
// socket pairs: round trips of every size (300 MiB streamed with flat
// memory), atomic replacement, modes, owners, mkdirs, append, and the
// failures: missing paths, directories, a full disk, a client that cancels
// or vanishes mid-stream, and hostile upload frames.
#include <sys/stat.h>

#include "guest-agent/files/files_test_util.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;

namespace {

struct FilesFixture {
    AgentHarness h;
    TempDir work;
    AgentClient client = h.connect();
    [[nodiscard]] std::string path(std::string_view name) const { return (work.path / name).string(); }
};

struct stat stat_of(const std::string& path) {
    struct stat st {};
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    return st;
}

// The session still answers after whatever came before.
void check_alive(AgentClient& client) {
    auto health = client.health();
    REQUIRE_MESSAGE(health.has_value(), (health ? "" : health.error().to_string()));
    CHECK((*health)["type"] == "result");
}

}  // namespace

TEST_CASE_FIXTURE(FilesFixture, "small, empty and text files round trip") {
    auto written = files::write_file_text(client, path("hello.txt"), "hello, guest\n");
    REQUIRE_MESSAGE(written.has_value(), (written ? "" : written.error().to_string()));
    CHECK(*written == 13);
    CHECK(slurp(path("hello.txt")) == "hello, guest\n");
    CHECK((stat_of(path("hello.txt")).st_mode & 07777) == 0644);
    auto text = files::read_file_text(client, path("hello.txt"));
    REQUIRE(text.has_value());
    CHECK(*text == "hello, guest\n");

    REQUIRE(files::write_file_text(client, path("empty"), ""));
    CHECK(fs::file_size(path("empty")) == 0);
    auto empty = files::read_file_text(client, path("empty"));
    REQUIRE(empty.has_value());
    CHECK(empty->empty());

    // Replacing keeps nothing of the old content.
    REQUIRE(files::write_file_text(client, path("hello.txt"), "bye"));
    CHECK(slurp(path("hello.txt")) == "bye");
    CHECK(temp_files(work.path).empty());
}

TEST_CASE_FIXTURE(FilesFixture, "local files copy both ways in chunks") {
    const auto local = work.path / "local.bin";
    write_pattern_file(local, 3 * kMaxDataPayload + 12345, 7);
    ::chmod(local.c_str(), 0750);
    auto up = files::write_file_from(client, local.string(), path("guest.bin"));
    REQUIRE(up.has_value());
    CHECK(*up == 3 * kMaxDataPayload + 12345);
    CHECK((stat_of(path("guest.bin")).st_mode & 07777) == 0750);  // the local mode, as cp would
    CHECK(file_hash(path("guest.bin")) == file_hash(local));

    auto down = files::read_file_to(client, path("guest.bin"), (work.path / "back.bin").string());
    REQUIRE(down.has_value());
    CHECK(file_hash(work.path / "back.bin") == file_hash(local));
}

TEST_CASE_FIXTURE(FilesFixture, "300 MiB streams both ways with flat memory") {
    // Under ASan, 64 MiB (still 64 frames) keeps the test inside meson's 30 s.
    constexpr std::uint64_t kSize = (kSanitized ? 64ULL : 300ULL) << 20;
    const std::uint64_t expected = pattern_hash(kSize, 42);
    const std::uint64_t rss_before = peak_rss();

    auto t0 = std::chrono::steady_clock::now();
    auto written = files::write_file(client, path("big"), pattern_source(kSize, 42));
    auto t1 = std::chrono::steady_clock::now();
    REQUIRE_MESSAGE(written.has_value(), (written ? "" : written.error().to_string()));
    CHECK(*written == kSize);
    CHECK(file_hash(path("big")) == expected);

    StreamHash hash;
    auto t2 = std::chrono::steady_clock::now();
    auto read =
        files::read_file(client, path("big"), [&](std::span<const std::uint8_t> bytes) -> Result<void> {
            hash.update(bytes);
            return ok();
        });
    auto t3 = std::chrono::steady_clock::now();
    REQUIRE(read.has_value());
    CHECK(*read == kSize);
    CHECK(hash.value() == expected);

    const std::uint64_t growth = peak_rss() - rss_before;
    MESSAGE((kSize >> 20), " MiB host->guest (with fsync) ", mib_per_s(kSize, t1 - t0), " MiB/s; guest->host ",
            mib_per_s(kSize, t3 - t2), " MiB/s; peak RSS growth ", growth >> 20, " MiB");
    if (!kSanitized) {  // ASan's quarantine keeps freed frames resident
        CHECK(growth < (48ULL << 20));
    }
}

TEST_CASE_FIXTURE(FilesFixture, "file_read takes an offset and a length") {
    spit(path("digits"), "0123456789");
    auto part = [&](std::uint64_t offset, std::optional<std::uint64_t> length) {
        std::string got;
        auto r = files::read_file(
            client, path("digits"),
            [&](std::span<const std::uint8_t> b) -> Result<void> {
                got.append(reinterpret_cast<const char*>(b.data()), b.size());
                return ok();
            },
            files::ReadRange{offset, length});
        REQUIRE(r.has_value());
        CHECK(*r == got.size());
        return got;
    };
    CHECK(part(3, 4) == "3456");
    CHECK(part(8, std::nullopt) == "89");
    CHECK(part(8, 100) == "89");
    CHECK(part(20, std::nullopt).empty());
    CHECK(part(0, 0).empty());

    REQUIRE(client.send_request("file_read", Json{{"path", path("digits")}}));
    auto started = client.read_reply();
    REQUIRE(started.has_value());
    CHECK((*started)["size"] == 10);
    CHECK((*started)["mode"] == 0644);
    while (true) {  // drain to the result
        auto frame = client.stream().read();
        REQUIRE(frame.has_value());
        if (frame->kind == FrameKind::Json) {
            break;
        }
    }
}

TEST_CASE_FIXTURE(FilesFixture, "mode and owner") {
    files::WriteOptions options;
    options.mode = 0600;
    REQUIRE(files::write_file_text(client, path("private"), "x", options));
    CHECK((stat_of(path("private")).st_mode & 07777) == 0600);

    // Set-id bits survive the chown (applied before the chmod).
    options.mode = 04755;
    options.owner.user = "nobody";
    REQUIRE(files::write_file_text(client, path("suid"), "x", options));
    auto st = stat_of(path("suid"));
    CHECK((st.st_mode & 07777) == 04755);
    CHECK(st.st_uid == 65534);
    CHECK(st.st_gid == 65534);

    options = {};
    options.owner.uid = 1234;
    options.owner.gid = 5678;
    REQUIRE(files::write_file_text(client, path("numeric"), "x", options));
    st = stat_of(path("numeric"));
    CHECK(st.st_uid == 1234);
    CHECK(st.st_gid == 5678);

    // A numeric user outside /etc/passwd: its group is the same number.
    options = {};
    options.owner.user = "4321";
    REQUIRE(files::write_file_text(client, path("uid-only"), "x", options));
    st = stat_of(path("uid-only"));
    CHECK(st.st_uid == 4321);
    CHECK(st.st_gid == 4321);

    options = {};
    options.owner.user = "no-such-user-here";
    auto unknown = files::write_file_text(client, path("nobody-file"), "x", options);
    REQUIRE_FALSE(unknown);
    CHECK(error_code(unknown.error()) == "not_found");
    CHECK_FALSE(fs::exists(path("nobody-file")));
    check_alive(client);
}

TEST_CASE("the default user (sbx-agent --default-user) owns what names no owner") {
    AgentHarness h;
    AgentOptions options = h.agent->options();
    options.default_user = "nobody";
    options.token = std::string(kTestToken);  // the door took the harness's copy
    h.agent = std::make_unique<Agent>(std::move(options));
    TempDir work;
    AgentClient client = h.connect();
    const std::string dir = (work.path / "d").string(), file = (work.path / "d/f").string();
    REQUIRE(files::make_dir(client, dir));
    files::WriteOptions write;
    REQUIRE(files::write_file_text(client, file, "x", write));
    for (const auto& made : {dir, file}) {
        auto st = stat_of(made);
        CHECK(st.st_uid == 65534);
        CHECK(st.st_gid == 65534);
    }
    // A request that names an owner, or a part of one, gets that.
    write.owner.user = "root";
    REQUIRE(files::write_file_text(client, file, "x", write));
    CHECK(stat_of(file).st_uid == 0);
    write.owner = {};
    write.owner.uid = 1234;
    REQUIRE(files::write_file_text(client, file, "x", write));
    CHECK(stat_of(file).st_uid == 1234);
    CHECK(stat_of(file).st_gid == 0);  // the agent's: no user named
}

TEST_CASE_FIXTURE(FilesFixture, "mkdirs creates the parents, owned like the file") {
    files::WriteOptions options;
    auto missing = files::write_file_text(client, path("a/b/c.txt"), "x", options);
    REQUIRE_FALSE(missing);
    CHECK(error_code(missing.error()) == "not_found");

    options.mkdirs = true;
    options.owner.uid = 1000;
    options.owner.gid = 1000;
    REQUIRE(files::write_file_text(client, path("a/b/c.txt"), "deep", options));
    CHECK(slurp(path("a/b/c.txt")) == "deep");
    for (const char* dir : {"a", "a/b"}) {
        auto st = stat_of(path(dir));
        CHECK(S_ISDIR(st.st_mode));
        CHECK((st.st_mode & 07777) == 0755);
        CHECK(st.st_uid == 1000);
    }
    // A file where a parent should be.
    spit(path("plain"), "x");
    auto blocked = files::write_file_text(client, path("plain/sub/f"), "x", options);
    REQUIRE_FALSE(blocked);
    CHECK(error_code(blocked.error()) == "not_a_directory");
}

TEST_CASE_FIXTURE(FilesFixture, "append adds in place and creates a missing file") {
    files::WriteOptions options;
    options.append = true;
    options.mode = 0640;
    REQUIRE(files::write_file_text(client, path("log"), "one\n", options));
    CHECK((stat_of(path("log")).st_mode & 07777) == 0640);
    ::chmod(path("log").c_str(), 0600);
    options.mode = 0666;
    REQUIRE(files::write_file_text(client, path("log"), "two\n", options));
    CHECK(slurp(path("log")) == "one\ntwo\n");
    CHECK((stat_of(path("log")).st_mode & 07777) == 0600);  // an existing file keeps its mode
    CHECK(temp_files(work.path).empty());
}

TEST_CASE_FIXTURE(FilesFixture, "missing paths and directories are errors and the session goes on") {
    auto missing = files::read_file_text(client, path("nope"));
    REQUIRE_FALSE(missing);
    CHECK(error_code(missing.error()) == "not_found");
    CHECK(missing.error().message.find(path("nope")) != std::string::npos);
    check_alive(client);

    auto dir_read = files::read_file_text(client, work.path.string());
    REQUIRE_FALSE(dir_read);
    CHECK(error_code(dir_read.error()) == "is_a_directory");

    fs::create_directory(path("dir"));
    auto dir_write = files::write_file_text(client, path("dir"), "x");
    REQUIRE_FALSE(dir_write);
    CHECK(error_code(dir_write.error()) == "is_a_directory");
    auto root_write = files::write_file_text(client, "/", "x");
    REQUIRE_FALSE(root_write);
    CHECK(error_code(root_write.error()) == "is_a_directory");

    // A fifo is refused at once, not waited on.
    REQUIRE(::mkfifo(path("fifo").c_str(), 0644) == 0);
    auto fifo = files::read_file_text(client, path("fifo"));
    REQUIRE_FALSE(fifo);
    CHECK(error_code(fifo.error()) == "bad_request");
    check_alive(client);
}

TEST_CASE_FIXTURE(FilesFixture, "bad fields are bad_request") {
    for (const Json& fields :
         {Json{{"path", 5}}, Json::object(), Json{{"path", "relative/path"}},
          Json{{"path", std::string("/tmp/a\0b", 8)}}, Json{{"path", "/x"}, {"offset", -1}},
          Json{{"path", "/x"}, {"length", "ten"}}}) {
        auto r = client.call("file_read", fields);
        REQUIRE_FALSE(r);
        CHECK_MESSAGE(error_code(r.error()) == "bad_request", fields.dump());
    }
    for (const Json& fields :
         {Json{{"path", path("f")}, {"mode", 010000}}, Json{{"path", path("f")}, {"mode", "644"}},
          Json{{"path", path("f")}, {"uid", -1}}, Json{{"path", path("f")}, {"mkdirs", 1}},
          Json{{"path", path("f")}, {"user", 7}}}) {
        auto r = client.call("file_write", fields);
        REQUIRE_FALSE(r);
        CHECK_MESSAGE(error_code(r.error()) == "bad_request", fields.dump());
    }
    CHECK_FALSE(fs::exists(path("f")));
    CHECK(temp_files(work.path).empty());
    check_alive(client);
}

TEST_CASE_FIXTURE(FilesFixture, "a reader during a slow write sees the old file, then the new one") {
    spit(path("config"), "old content");
    int calls = 0;
    auto written =
        files::write_file(client, path("config"), [&](std::span<std::uint8_t> buffer) -> Result<std::size_t> {
            ++calls;
            if (calls == 1) {
                std::fill_n(buffer.begin(), 1000, 'n');
                return 1000;
            }
            if (calls == 2) {
                // Mid-write: the bytes so far sit in the temporary file only.
                for (int i = 0; i < 100 && temp_files(work.path).empty(); ++i) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(10));
                }
                CHECK(slurp(path("config")) == "old content");
                CHECK(temp_files(work.path).size() == 1);
                std::fill_n(buffer.begin(), 24, 'n');
                return 24;
            }
            return 0;
        });
    REQUIRE(written.has_value());
    CHECK(*written == 1024);
    CHECK(slurp(path("config")) == std::string(1024, 'n'));
    CHECK(temp_files(work.path).empty());
}

TEST_CASE_FIXTURE(FilesFixture, "a cancelled write leaves the old file and no temporary") {
    spit(path("keep"), "precious");
    int calls = 0;
    auto r =
        files::write_file(client, path("keep"), [&](std::span<std::uint8_t> buffer) -> Result<std::size_t> {
            if (++calls == 1) {
                std::fill_n(buffer.begin(), buffer.size(), 'x');
                return buffer.size();
            }
            return make_error("the local disk went away");
        });
    REQUIRE_FALSE(r);
    CHECK(r.error().message == "the local disk went away");
    CHECK(slurp(path("keep")) == "precious");
    CHECK(temp_files(work.path).empty());
    check_alive(client);
}

TEST_CASE_FIXTURE(FilesFixture, "a full disk is no_space; the old file stays, the next request is served") {
    TinyTmpfs tiny;
    if (!tiny.mounted()) {
        MESSAGE("skipped: cannot mount a tmpfs here");
        return;
    }
    const std::string target = (tiny.dir.path / "f").string();
    spit(target, "old");
    auto r = files::write_file(client, target, pattern_source(8 << 20, 1));
    REQUIRE_FALSE(r);
    CHECK(error_code(r.error()) == "no_space");
    CHECK(slurp(target) == "old");
    CHECK(temp_files(tiny.dir.path).empty());
    check_alive(client);
    REQUIRE(files::write_file_text(client, target, "new"));  // room again once the temporary is gone
    CHECK(slurp(target) == "new");

    // Appending fills the disk in place; the error is the same.
    files::WriteOptions append;
    append.append = true;
    auto full = files::write_file(client, target, pattern_source(8 << 20, 1), append);
    REQUIRE_FALSE(full);
    CHECK(error_code(full.error()) == "no_space");
    check_alive(client);
}

TEST_CASE_FIXTURE(FilesFixture, "a client vanishing mid-write leaves no temporary file") {
    spit(path("victim"), "old");
    {
        AgentClient doomed = h.connect();
        auto ready = doomed.call("file_write", Json{{"path", path("victim")}});
        REQUIRE(ready.has_value());
        std::vector<std::uint8_t> bytes(5000, 'z');
        REQUIRE(doomed.stream().write_data(Channel::Content, 0, bytes));
        for (int i = 0; i < 100 && temp_files(work.path).empty(); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        CHECK(temp_files(work.path).size() == 1);
    }  // closed without EOF
    for (int i = 0; i < 500 && !temp_files(work.path).empty(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(temp_files(work.path).empty());
    CHECK(slurp(path("victim")) == "old");
    check_alive(client);
}

TEST_CASE_FIXTURE(FilesFixture, "hostile upload frames abort the write; the session goes on") {
    spit(path("t"), "old");
    std::vector<std::uint8_t> bytes(100, 'q');
    auto start = [&] { REQUIRE(client.call("file_write", Json{{"path", path("t")}}).has_value()); };

    start();  // a gap in the offsets
    REQUIRE(client.stream().write_data(Channel::Content, 0, bytes));
    REQUIRE(client.stream().write_data(Channel::Content, 500, bytes));
    auto gap = client.read_reply();
    REQUIRE_FALSE(gap);
    CHECK(error_code(gap.error()) == "bad_request");
    REQUIRE(client.stream().write_eof(Channel::Content));  // late: discarded between requests

    start();  // the wrong channel
    REQUIRE(client.stream().write_data(Channel::Stdin, 0, bytes));
    auto channel = client.read_reply();
    REQUIRE_FALSE(channel);
    CHECK(error_code(channel.error()) == "bad_request");

    start();  // a request instead of the data
    REQUIRE(client.send_request("health"));
    auto message = client.read_reply();
    REQUIRE_FALSE(message);
    CHECK(error_code(message.error()) == "bad_request");

    CHECK(slurp(path("t")) == "old");
    CHECK(temp_files(work.path).empty());
    check_alive(client);
}

TEST_CASE_FIXTURE(FilesFixture, "a broken frame mid-upload ends the session with bad_frame") {
    spit(path("t"), "old");
    REQUIRE(client.call("file_write", Json{{"path", path("t")}}).has_value());
    const std::uint8_t garbage[] = {0, 0, 0, 0, 9};  // a zero length
    REQUIRE(::write(client.stream().fd(), garbage, sizeof garbage) == sizeof garbage);
    auto reply = client.read_reply();
    REQUIRE_FALSE(reply);
    CHECK(error_code(reply.error()) == "bad_frame");
    CHECK_FALSE(client.health());  // closed
    CHECK(temp_files(work.path).empty());
    CHECK(slurp(path("t")) == "old");
}

// Transfer rates over the socket pair without disk or test-side hashing in
// the way: a file on tmpfs, a constant source, a counting sink. Run with
// SBX_FILES_BENCH=1 (an optimized build means something).
TEST_CASE_FIXTURE(FilesFixture, "throughput over the socket pair" *
                                    doctest::skip(std::getenv("SBX_FILES_BENCH") == nullptr)) {
    TinyTmpfs memory("size=1200m");
    if (!memory.mounted()) {
        MESSAGE("skipped: cannot mount a tmpfs here");
        return;
    }
    constexpr std::uint64_t kSize = 1ULL << 30;
    const std::string target = (memory.dir.path / "bench").string();
    for (int round = 0; round < 3; ++round) {
        ::unlink(target.c_str());  // room for the next temporary file
        std::uint64_t produced = 0;
        auto t0 = std::chrono::steady_clock::now();
        auto up =
            files::write_file(client, target, [&](std::span<std::uint8_t> buffer) -> Result<std::size_t> {
                const auto n =
                    static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), kSize - produced));
                std::memset(buffer.data(), 'b', n);  // touch the bytes, as a real source would
                produced += n;
                return n;
            });
        auto t1 = std::chrono::steady_clock::now();
        REQUIRE_MESSAGE(up.has_value(), (up ? "" : up.error().to_string()));
        std::uint64_t consumed = 0;
        auto down =
            files::read_file(client, target, [&](std::span<const std::uint8_t> bytes) -> Result<void> {
                consumed += bytes.size();
                return ok();
            });
        auto t2 = std::chrono::steady_clock::now();
        REQUIRE(down.has_value());
        std::uint64_t archived = 0;
        auto tar = files::get_tar(client, memory.dir.path.string(),
                                  [&](std::span<const std::uint8_t> bytes) -> Result<void> {
                                      archived += bytes.size();
                                      return ok();
                                  });
        auto t3 = std::chrono::steady_clock::now();
        REQUIRE(tar.has_value());
        MESSAGE("1 GiB on tmpfs: file_write ", mib_per_s(kSize, t1 - t0),
                " MiB/s (fsync included), file_read ", mib_per_s(consumed, t2 - t1), " MiB/s, tar_get ",
                mib_per_s(archived, t3 - t2), " MiB/s");
    }
}
