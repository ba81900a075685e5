// stat, list, mkdir, remove and rename through a real agent and client:
// results, error codes, the list limit and batching, and recursive removal
// that does not follow symlinks out of the tree.
#include <sys/stat.h>

#include "guest-agent/files/files_test_util.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;

namespace {

struct PathFixture {
    AgentHarness h;
    TempDir work;
    AgentClient client = h.connect();
    [[nodiscard]] std::string path(std::string_view name) const { return (work.path / name).string(); }
};

template <typename T>
std::string_view code_of(const Result<T>& r) {
    REQUIRE_FALSE(r.has_value());
    return error_code(r.error());
}

}  // namespace

TEST_CASE_FIXTURE(PathFixture, "stat reports kind, size, mode, owner, time and link targets") {
    spit(path("f"), "12345");
    ::chmod(path("f").c_str(), 0640);
    ::chown(path("f").c_str(), 1234, 5678);
    const timespec times[2] = {{0, UTIME_OMIT}, {1'600'000'000, 0}};
    ::utimensat(AT_FDCWD, path("f").c_str(), times, 0);
    auto f = files::stat(client, path("f"));
    REQUIRE(f.has_value());
    CHECK(f->kind == "file");
    CHECK(f->size == 5);
    CHECK(f->mode == 0640);
    CHECK(f->uid == 1234);
    CHECK(f->gid == 5678);
    CHECK(f->mtime == 1'600'000'000);

    fs::create_directory(path("d"));
    auto d = files::stat(client, path("d"));
    REQUIRE(d.has_value());
    CHECK(d->kind == "dir");

    fs::create_symlink("f", path("link"));
    auto link = files::stat(client, path("link"));
    REQUIRE(link.has_value());
    CHECK(link->kind == "symlink");
    CHECK(link->target == "f");
    auto followed = files::stat(client, path("link"), true);
    REQUIRE(followed.has_value());
    CHECK(followed->kind == "file");
    CHECK(followed->size == 5);

    fs::create_symlink("missing", path("dangling"));
    CHECK(files::stat(client, path("dangling")).has_value());
    CHECK(code_of(files::stat(client, path("dangling"), true)) == "not_found");
    CHECK(code_of(files::stat(client, path("nothing"))) == "not_found");
    CHECK(code_of(files::stat(client, path("f/below"))) == "not_a_directory");
    CHECK(code_of(client.call("stat", Json{{"path", path("f")}, {"follow", "yes"}})) == "bad_request");
    CHECK(files::stat(client, path("f")).has_value());
}

TEST_CASE_FIXTURE(PathFixture, "list gives every entry, sorted, without following links") {
    spit(path("b.txt"), "bb");
    fs::create_directory(path("a-dir"));
    fs::create_symlink("/etc", path("c-link"));
    REQUIRE(::mkfifo(path("d-fifo").c_str(), 0600) == 0);
    auto entries = files::list(client, work.path.string());
    REQUIRE(entries.has_value());
    REQUIRE(entries->size() == 4);
    CHECK((*entries)[0].name == "a-dir");
    CHECK((*entries)[0].kind == "dir");
    CHECK((*entries)[1].name == "b.txt");
    CHECK((*entries)[1].kind == "file");
    CHECK((*entries)[1].size == 2);
    CHECK((*entries)[1].mode == 0644);
    CHECK((*entries)[2].kind == "symlink");
    CHECK((*entries)[3].kind == "other");

    auto empty = files::list(client, path("a-dir"));
    REQUIRE(empty.has_value());
    CHECK(empty->empty());
    CHECK(code_of(files::list(client, path("missing"))) == "not_found");
    CHECK(code_of(files::list(client, path("b.txt"))) == "not_a_directory");
}

TEST_CASE_FIXTURE(PathFixture, "a large listing arrives in batches under the frame limit") {
    // 3000 names of 200 bytes: about 800 KiB of JSON, so many messages.
    TinyTmpfs memory("size=16m");  // creating files is slow on some disks
    const fs::path many = (memory.mounted() ? memory.dir.path : work.path) / "many";
    fs::create_directory(many);
    for (int i = 0; i < 3000; ++i) {
        const std::string name = fmt::format("{:05}-{}", i, std::string(194, 'n'));
        UniqueFd fd(::open((many / name).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
        REQUIRE(fd);
    }
    auto entries = files::list(client, many.string());
    REQUIRE_MESSAGE(entries.has_value(), (entries ? "" : entries.error().to_string()));
    REQUIRE(entries->size() == 3000);
    CHECK(entries->front().name.starts_with("00000-"));
    CHECK(entries->back().name.starts_with("02999-"));
    CHECK(files::stat(client, many.string()).has_value());
}

TEST_CASE_FIXTURE(PathFixture, "more than 100 000 entries is limit") {
    TinyTmpfs memory("size=64m");  // 100 001 files on a disk would take a while to create and remove
    const fs::path huge = (memory.mounted() ? memory.dir.path : work.path) / "huge";
    fs::create_directory(huge);
    const UniqueFd dir(::open(huge.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    for (int i = 0; i <= 100'000; ++i) {
        REQUIRE(::mknodat(dir.get(), std::to_string(i).c_str(), S_IFREG | 0600, 0) == 0);
    }
    CHECK(code_of(files::list(client, huge.string())) == "limit");
    CHECK(files::stat(client, huge.string()).has_value());
    REQUIRE(::unlinkat(dir.get(), "100000", 0) == 0);
    auto all = files::list(client, huge.string());
    REQUIRE(all.has_value());
    CHECK(all->size() == 100'000);
    REQUIRE(files::remove(client, huge.string(), true));
    CHECK_FALSE(fs::exists(huge));
}

TEST_CASE_FIXTURE(PathFixture, "mkdir with and without parents, exact mode, owner") {
    files::MkdirOptions options;
    options.mode = 0700;
    options.owner.user = "nobody";
    REQUIRE(files::make_dir(client, path("x/y/z"), options));
    for (const char* dir : {"x", "x/y", "x/y/z"}) {
        struct stat st {};
        REQUIRE(::stat(path(dir).c_str(), &st) == 0);
        CHECK(S_ISDIR(st.st_mode));
        CHECK((st.st_mode & 07777) == 0700);
        CHECK(st.st_uid == 65534);
    }
    REQUIRE(files::make_dir(client, path("x/y/z")));  // -p: already there is fine

    options = {};
    options.parents = false;
    CHECK(code_of(files::make_dir(client, path("x/y/z"), options)) == "exists");
    CHECK(code_of(files::make_dir(client, path("p/q"), options)) == "not_found");
    options.mode = 0777;  // not filtered by the umask
    REQUIRE(files::make_dir(client, path("open"), options));
    struct stat st {};
    REQUIRE(::stat(path("open").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0777);

    spit(path("file"), "x");
    CHECK(code_of(files::make_dir(client, path("file"))) == "exists");
    CHECK(code_of(files::make_dir(client, path("file/sub"))) == "not_a_directory");
    CHECK(code_of(client.call("mkdir", Json{{"path", path("m")}, {"mode", 0170000}})) == "bad_request");
}

TEST_CASE_FIXTURE(PathFixture, "remove files, empty and full directories") {
    spit(path("f"), "x");
    REQUIRE(files::remove(client, path("f")));
    CHECK_FALSE(fs::exists(path("f")));
    CHECK(code_of(files::remove(client, path("f"))) == "not_found");

    fs::create_directories(path("full/sub"));
    spit(path("full/sub/g"), "x");
    CHECK(code_of(files::remove(client, path("full"))) == "not_empty");
    CHECK(fs::exists(path("full/sub/g")));
    REQUIRE(files::remove(client, path("full/"), true));
    CHECK_FALSE(fs::exists(path("full")));

    fs::create_directory(path("empty"));
    REQUIRE(files::remove(client, path("empty")));
    CHECK_FALSE(fs::exists(path("empty")));

    CHECK(code_of(files::remove(client, "/", true)) == "bad_request");
    CHECK(code_of(files::remove(client, path("."), true)) == "bad_request");
}

TEST_CASE_FIXTURE(PathFixture, "recursive remove does not follow symlinks out of the tree") {
    TempDir outside;
    spit(outside.path / "precious", "keep me");
    fs::create_directories(path("tree/deep/deeper"));
    spit(path("tree/deep/deeper/file"), "x");
    fs::create_directory_symlink(outside.path, path("tree/deep/to-outside"));
    fs::create_symlink(outside.path / "precious", path("tree/file-link"));
    REQUIRE(files::remove(client, path("tree"), true));
    CHECK_FALSE(fs::exists(path("tree")));
    CHECK(slurp(outside.path / "precious") == "keep me");

    // A symlink named as the path itself is removed, not its target.
    fs::create_directory_symlink(outside.path, path("dir-link"));
    REQUIRE(files::remove(client, path("dir-link"), true));
    CHECK_FALSE(fs::is_symlink(path("dir-link")));
    CHECK(slurp(outside.path / "precious") == "keep me");
}

TEST_CASE_FIXTURE(PathFixture, "rename moves, replaces and reports errors") {
    spit(path("a"), "A");
    spit(path("b"), "B");
    REQUIRE(files::rename(client, path("a"), path("b")));
    CHECK_FALSE(fs::exists(path("a")));
    CHECK(slurp(path("b")) == "A");
    CHECK(code_of(files::rename(client, path("a"), path("c"))) == "not_found");
    fs::create_directories(path("d/e"));
    CHECK(code_of(files::rename(client, path("b"), path("d"))) == "is_a_directory");
    CHECK(code_of(files::rename(client, path("d"), path("d/e/f"))) == "io_error");  // EINVAL: into itself
    CHECK(code_of(client.call("rename", Json{{"from", path("b")}})) == "bad_request");
    CHECK(fs::exists(path("b")));
}
