// tar_get/tar_put and the tar format: a tree with long names, symlinks,
// empty directories, a large file and odd modes goes up and comes back
// intact; GNU tar reads what we write and we read what it writes; PAX
// fields for what ustar cannot hold; and hostile archives are refused
// with nothing written outside the target.
#include <sys/stat.h>

#include <cstdlib>
#include <map>

#include "guest-agent/files/files_test_util.hpp"
#include "guest-agent/files/tar_reader.hpp"
#include "guest-agent/files/tar_writer.hpp"
#include "guest-agent/files/tree_extractor.hpp"

using namespace sbx;
using namespace sbx::agent;
using namespace sbx::agent::testing;

namespace {

struct Node {
    char type = '?';
    std::uint32_t mode = 0;
    std::uint64_t size = 0;
    std::uint64_t hash = 0;
    std::string target;
    std::int64_t mtime = 0;
    std::uint32_t uid = 0;
    bool operator==(const Node& o) const {
        return type == o.type && mode == o.mode && size == o.size && hash == o.hash && target == o.target &&
               (type == 'l' || mtime == o.mtime);  // a symlink's time is best effort
    }
};

// Every entry below `root` (not following links), by relative path.
std::map<std::string, Node> snapshot(const fs::path& root) {
    std::map<std::string, Node> nodes;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
        struct stat st {};
        REQUIRE(::lstat(e.path().c_str(), &st) == 0);
        Node n;
        n.mode = st.st_mode & 07777;
        n.mtime = st.st_mtim.tv_sec;
        n.uid = st.st_uid;
        if (S_ISREG(st.st_mode)) {
            n.type = 'f';
            n.size = static_cast<std::uint64_t>(st.st_size);
            n.hash = file_hash(e.path());
        } else if (S_ISDIR(st.st_mode)) {
            n.type = 'd';
        } else if (S_ISLNK(st.st_mode)) {
            n.type = 'l';
            n.target = fs::read_symlink(e.path()).string();
            n.mode = 0;
        } else {
            n.type = 'o';
        }
        nodes[e.path().lexically_relative(root).string()] = n;  // fs::relative would resolve links
    }
    return nodes;
}

void check_same(const std::map<std::string, Node>& a, const std::map<std::string, Node>& b) {
    CHECK(a.size() == b.size());
    for (const auto& [path, node] : a) {
        auto it = b.find(path);
        if (it == b.end()) {
            FAIL_CHECK("missing: ", path);
            continue;
        }
        CHECK_MESSAGE(node == it->second, path, ": type ", node.type, "/", it->second.type, " mode ",
                      node.mode, "/", it->second.mode, " size ", node.size, "/", it->second.size, " mtime ",
                      node.mtime, "/", it->second.mtime);
    }
}

void set_mtime(const fs::path& path, std::int64_t seconds) {
    const timespec times[2] = {{0, UTIME_OMIT}, {static_cast<time_t>(seconds), 0}};
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW) == 0);
}

// A tree with what tar must carry: long names (> 100 and > 255 bytes in
// all), symlinks (one with a long target, one dangling), empty
// directories, a file over several DATA frames, and odd modes.
void build_tree(const fs::path& root) {
    const std::string long_dir(120, 'd');
    const std::string long_file(200, 'f');
    fs::create_directories(root / long_dir / "x");
    spit(root / long_dir / long_file, "in a long place");
    fs::path deep = root;
    for (int i = 0; i < 6; ++i) {
        deep /= fmt::format("level{}-{}", i, std::string(50, 'l'));
    }
    fs::create_directories(deep);
    spit(deep / "bottom.txt", "the bottom");
    spit(root / "small.txt", "small\n");
    write_pattern_file(root / "big.bin", 20 * kMaxDataPayload / 3 + 777, 99);
    fs::create_directories(root / "empty");
    fs::create_directories(root / "nested" / "empty");
    fs::create_directories(root / "sub");
    fs::create_symlink("small.txt", root / "link-to-file");
    fs::create_symlink("../small.txt", root / "sub" / "up");
    fs::create_symlink("nowhere", root / "dangling");
    fs::create_symlink(long_dir + "/" + long_file, root / "long-target");
    spit(root / "ro.txt", "read only");
    ::chmod((root / "ro.txt").c_str(), 0444);
    spit(root / "run.sh", "#!/bin/sh\n");
    ::chmod((root / "run.sh").c_str(), 0755);
    spit(root / "suid", "x");
    ::chmod((root / "suid").c_str(), 04755);
    fs::create_directories(root / "locked");
    spit(root / "locked" / "inside", "x");
    ::chmod((root / "locked").c_str(), 0500);
    ::chmod((root / "empty").c_str(), 0711);
    set_mtime(root / "small.txt", 1'000'000'000);
    set_mtime(root / "nested", 1'100'000'000);
}

struct TarFixture {
    AgentHarness h;
    TempDir work;
    AgentClient client = h.connect();
};

// Archives built by hand, for the reader and the extractor.
struct ArchiveBuilder {
    std::vector<std::uint8_t> bytes;
    ArchiveBuilder& add(tar::Entry entry, std::string_view content = {}) {
        if (entry.type == tar::EntryType::File) {
            entry.size = content.size();
        }
        auto header = tar::encode_header(entry);
        bytes.insert(bytes.end(), header.begin(), header.end());
        bytes.insert(bytes.end(), content.begin(), content.end());
        bytes.resize((bytes.size() + tar::kBlock - 1) / tar::kBlock * tar::kBlock, 0);
        return *this;
    }
    ArchiveBuilder& file(std::string path, std::string_view content, std::uint32_t mode = 0644) {
        return add(tar::Entry{std::move(path), tar::EntryType::File, mode, 0, 0, 0, 0, 0, {}}, content);
    }
    ArchiveBuilder& dir(std::string path) {
        return add(tar::Entry{std::move(path), tar::EntryType::Directory, 0755, 0, 0, 0, 0, 0, {}});
    }
    ArchiveBuilder& link(std::string path, std::string target,
                         tar::EntryType type = tar::EntryType::Symlink) {
        return add(tar::Entry{std::move(path), type, 0777, 0, 0, 0, 0, 0, std::move(target)});
    }
    std::vector<std::uint8_t> done() {
        bytes.resize(bytes.size() + 2 * tar::kBlock, 0);
        return bytes;
    }
};

files::ChunkSource bytes_source(std::vector<std::uint8_t> data) {
    return [data = std::move(data),
            pos = std::size_t{0}](std::span<std::uint8_t> buffer) mutable -> Result<std::size_t> {
        const std::size_t n = std::min(buffer.size(), data.size() - pos);
        std::copy_n(data.begin() + static_cast<std::ptrdiff_t>(pos), n, buffer.begin());
        pos += n;
        return n;
    };
}

// Recomputes a hand-edited header's checksum.
void reseal(std::uint8_t* block) {
    std::memset(block + 148, ' ', 8);
    unsigned sum = 0;
    for (std::size_t i = 0; i < tar::kBlock; ++i) {
        sum += block[i];
    }
    std::snprintf(reinterpret_cast<char*>(block + 148), 8, "%06o", sum);
}

struct Recorder final : tar::TarEntryHandler {
    std::vector<tar::Entry> entries;
    std::uint64_t data = 0;
    Result<void> begin_entry(const tar::Entry& e) override {
        entries.push_back(e);
        return ok();
    }
    Result<void> entry_data(std::span<const std::uint8_t> b) override {
        data += b.size();
        return ok();
    }
    Result<void> end_entry() override { return ok(); }
};

bool have_gnu_tar() {
    return std::system("tar --version >/dev/null 2>&1") == 0;
}

}  // namespace

TEST_CASE_FIXTURE(TarFixture, "a tree goes up and comes back with names, links, modes and times") {
    const fs::path source = work.path / "source";
    build_tree(source);
    const auto original = snapshot(source);

    const std::string guest = (work.path / "guest" / "tree").string();  // created by tar_put
    files::Ownership owner;
    owner.uid = 1000;
    owner.gid = 1000;
    auto put = files::put_tree(client, source.string(), guest, owner);
    REQUIRE_MESSAGE(put.has_value(), (put ? "" : put.error().to_string()));
    CHECK(put->entries == original.size());
    auto in_guest = snapshot(guest);
    check_same(original, in_guest);
    for (const auto& [path, node] : in_guest) {
        CHECK_MESSAGE(node.uid == 1000, path);
    }

    const fs::path back = work.path / "back" / "here";  // parents created too
    auto get = files::get_tree(client, guest, back.string());
    REQUIRE_MESSAGE(get.has_value(), (get ? "" : get.error().to_string()));
    CHECK(get->entries == original.size());
    CHECK(get->bytes == put->bytes);
    auto returned = snapshot(back);
    // From a guest, set-id bits are dropped on the host.
    auto expected = original;
    expected["suid"].mode = 0755;
    check_same(expected, returned);
    ::chmod((source / "locked").c_str(), 0700);  // let TempDir clean up
}

TEST_CASE_FIXTURE(TarFixture, "tar_get of a single file, of nothing, and skipped special files") {
    spit(work.path / "one.txt", "just me");
    auto one = files::get_tree(client, (work.path / "one.txt").string(), (work.path / "out").string());
    REQUIRE(one.has_value());
    CHECK(one->entries == 1);
    CHECK(slurp(work.path / "out" / "one.txt") == "just me");

    CHECK(error_code(files::get_tree(client, (work.path / "missing").string(), (work.path / "o2").string())
                         .error()) == "not_found");

    fs::create_directory(work.path / "special");
    REQUIRE(::mkfifo((work.path / "special" / "fifo").c_str(), 0600) == 0);
    spit(work.path / "special" / "f", "x");
    auto special = files::get_tree(client, (work.path / "special").string(), (work.path / "o3").string());
    REQUIRE(special.has_value());
    CHECK(special->entries == 1);
    CHECK(special->skipped == 1);
    CHECK_FALSE(fs::exists(work.path / "o3" / "fifo"));
}

TEST_CASE_FIXTURE(TarFixture, "GNU tar reads our archives and we read GNU tar's") {
    if (!have_gnu_tar()) {
        MESSAGE("skipped: no tar on this host");
        return;
    }
    const fs::path source = work.path / "source";
    build_tree(source);
    ::chmod((source / "locked").c_str(), 0700);
    const auto original = snapshot(source);

    // Ours -> GNU tar.
    const fs::path ours = work.path / "ours.tar";
    {
        UniqueFd out(::open(ours.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        auto got = files::get_tar(client, source.string(), [&](std::span<const std::uint8_t> b) {
            return write_all(out.get(), b.data(), b.size());
        });
        REQUIRE(got.has_value());
        CHECK(got->bytes == fs::file_size(ours));
    }
    fs::create_directory(work.path / "by-gnu");
    REQUIRE(std::system(fmt::format("tar -C '{}' -xpf '{}'", (work.path / "by-gnu").string(), ours.string())
                            .c_str()) == 0);
    check_same(original, snapshot(work.path / "by-gnu"));

    // GNU tar -> ours, in its own format (long names as 'L' entries) and in PAX.
    for (const char* format : {"gnu", "pax", "ustar"}) {
        CAPTURE(format);
        const fs::path theirs = work.path / fmt::format("{}.tar", format);
        const fs::path subset = std::string_view(format) == "ustar" ? fs::path("sub") : fs::path(".");
        REQUIRE(std::system(fmt::format("tar -C '{}' --format={} -cf '{}' '{}'", source.string(), format,
                                        theirs.string(), subset.string())
                                .c_str()) == 0);
        UniqueFd in(::open(theirs.c_str(), O_RDONLY | O_CLOEXEC));
        const std::string guest = (work.path / fmt::format("from-{}", format)).string();
        auto put = files::put_tar(client, guest, [&](std::span<std::uint8_t> b) -> Result<std::size_t> {
            ssize_t n = ::read(in.get(), b.data(), b.size());
            if (n < 0) {
                return sys_error("read");
            }
            return static_cast<std::size_t>(n);
        });
        REQUIRE_MESSAGE(put.has_value(), (put ? "" : put.error().to_string()));
        if (subset == ".") {
            check_same(original, snapshot(guest));
        } else {
            CHECK(fs::is_symlink(fs::path(guest) / "sub" / "up"));
        }
    }
}

TEST_CASE("PAX carries what ustar cannot: 9 GiB sizes, long names and targets, big ids, old times") {
    tar::Entry big{"big.img", tar::EntryType::File, 0600, 3'000'000, 4'000'000, 9ULL << 30, -86400, 0, {}};
    tar::Entry named{std::string(300, 'n'), tar::EntryType::Symlink, 0777, 0, 0, 0, 1'700'000'000, 0,
                     std::string(150, 't')};
    Recorder recorder;
    tar::TarReader reader(recorder);
    auto named_header = tar::encode_header(named);
    REQUIRE(reader.feed(named_header));
    auto big_header = tar::encode_header(big);
    CHECK(big_header.size() == 3 * tar::kBlock);  // PAX header, its records, the ustar header
    REQUIRE(reader.feed(big_header));
    REQUIRE(reader.feed(std::vector<std::uint8_t>(4096, 0xab)));  // the start of 9 GiB of content
    REQUIRE(recorder.entries.size() == 2);
    CHECK(recorder.entries[0].path == named.path);
    CHECK(recorder.entries[0].link_target == named.link_target);
    CHECK(recorder.entries[0].type == tar::EntryType::Symlink);
    const tar::Entry& e = recorder.entries[1];
    CHECK(e.size == 9ULL << 30);
    CHECK(e.uid == 3'000'000);
    CHECK(e.gid == 4'000'000);
    CHECK(e.mtime == -86400);
    CHECK(e.mode == 0600);
    CHECK(recorder.data == 4096);
    auto cut = reader.finish();
    REQUIRE_FALSE(cut);
    CHECK(cut.error().message.find("truncated") != std::string::npos);
}

TEST_CASE("the reader takes any split of its input and GNU base-256 sizes") {
    ArchiveBuilder builder;
    builder.file("a.txt", "alpha").dir("d/").file("d/b.txt", std::string(3000, 'b'));
    auto archive = builder.done();
    // GNU writes sizes that do not fit 11 octal digits in base 256.
    std::uint8_t* b_header = archive.data() + 3 * tar::kBlock;
    std::memset(b_header + 124, 0, 12);
    b_header[124] = 0x80;
    b_header[134] = 3000 >> 8;
    b_header[135] = 3000 & 0xff;
    reseal(b_header);
    for (std::size_t piece : {std::size_t{1}, std::size_t{7}, std::size_t{512}, archive.size()}) {
        Recorder recorder;
        tar::TarReader reader(recorder);
        for (std::size_t i = 0; i < archive.size(); i += piece) {
            REQUIRE(reader.feed(std::span(archive).subspan(i, std::min(piece, archive.size() - i))));
        }
        REQUIRE(reader.finish());
        REQUIRE(recorder.entries.size() == 3);
        CHECK(recorder.entries[2].size == 3000);
        CHECK(recorder.data == 3005);
    }
}

TEST_CASE_FIXTURE(TarFixture, "hostile archives are refused and nothing lands outside the target") {
    const fs::path target = work.path / "target";
    const fs::path outside = work.path / "outside";
    fs::create_directories(target / "sub");
    fs::create_directories(outside);
    spit(outside / "precious", "keep");
    fs::create_directory_symlink(outside, target / "pre-existing");
    fs::create_symlink(outside / "precious", target / "pre-file");

    auto big_pax = ArchiveBuilder().file("x", "x").done();
    big_pax[156] = 'x';
    std::snprintf(reinterpret_cast<char*>(big_pax.data() + 124), 12, "%011o", 1u << 30);
    reseal(big_pax.data());
    auto bad_sum = ArchiveBuilder().file("x", "x").done();
    bad_sum[0] = 'y';
    auto truncated = ArchiveBuilder().file("partial", std::string(5000, 'p')).done();
    truncated.resize(tar::kBlock + 3000);
    auto unended = ArchiveBuilder().file("whole", "w").bytes;
    std::vector<std::uint8_t> garbage(4096);
    fill_pattern(garbage, 0, 5);
    tar::Entry pax_nul{
        std::string("nul\0name", 8) + std::string(100, 'n'), tar::EntryType::File, 0644, 0, 0, 0, 0, 0, {}};

    struct Case {
        const char* what;
        std::vector<std::uint8_t> archive;
        const char* message;  // part of the error
    };
    const std::vector<Case> cases = {
        {"absolute path", ArchiveBuilder().file("/etc/sbx-evil", "x").done(), "absolute"},
        {"dot-dot", ArchiveBuilder().file("../outside/evil", "x").done(), ".."},
        {"dot-dot inside", ArchiveBuilder().file("sub/../../outside/evil", "x").done(), ".."},
        {"absolute symlink", ArchiveBuilder().link("esc", outside.string()).file("esc/evil", "x").done(),
         "absolute"},
        {"escaping symlink", ArchiveBuilder().link("esc", "../outside").file("esc/evil", "x").done(),
         "outside"},
        {"climb after a name", ArchiveBuilder().link("sub/esc", "x/../../..").done(), "outside"},
        {"file through an extracted symlink", ArchiveBuilder().link("in", "sub").file("in/evil", "x").done(),
         "symlink"},
        {"file through an existing symlink", ArchiveBuilder().file("pre-existing/evil", "x").done(),
         "symlink"},
        {"hard link out", ArchiveBuilder().link("h", "../outside/precious", tar::EntryType::HardLink).done(),
         ".."},
        {"hard link absolute", ArchiveBuilder().link("h", "/etc/passwd", tar::EntryType::HardLink).done(),
         "absolute"},
        {"hard link through a symlink",
         ArchiveBuilder().link("h", "pre-existing/precious", tar::EntryType::HardLink).done(), "symlink"},
        {"truncated", truncated, "truncated"},
        {"no end blocks", unended, "end-of-archive"},
        {"bad checksum", bad_sum, "checksum"},
        {"absurd PAX size", big_pax, "PAX header of 1073741824 bytes"},
        {"garbage", garbage, "checksum"},
        {"NUL in a PAX name", ArchiveBuilder().add(pax_nul, "x").done(), "NUL"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.what);
        auto r = files::put_tar(client, target.string(), bytes_source(c.archive));
        REQUIRE_FALSE(r);
        CHECK(error_code(r.error()) == "bad_request");
        CHECK_MESSAGE(r.error().message.find(c.message) != std::string::npos, r.error().message);
        CHECK(fs::exists(outside / "precious"));
        CHECK(slurp(outside / "precious") == "keep");
        CHECK(std::distance(fs::directory_iterator(outside), fs::directory_iterator()) == 1);
        CHECK_FALSE(fs::exists("/etc/sbx-evil"));
        CHECK_FALSE(fs::exists(target / "partial"));  // a file cut short is removed
        auto alive = client.health();
        REQUIRE(alive.has_value());
    }
    CHECK_FALSE(fs::exists(target / "sub" / "evil"));

    // A file entry replaces a symlink at its name, never writing through it.
    auto replace = files::put_tar(client, target.string(),
                                  bytes_source(ArchiveBuilder().file("pre-file", "mine").done()));
    REQUIRE(replace.has_value());
    CHECK_FALSE(fs::is_symlink(target / "pre-file"));
    CHECK(slurp(target / "pre-file") == "mine");
    CHECK(slurp(outside / "precious") == "keep");

    // Links that stay inside are fine, hard links included; devices are skipped.
    auto with_device = ArchiveBuilder()
                           .file("sub/real", "real")
                           .link("sub/up", "../sub/real")
                           .link("sub/hard", "sub/real", tar::EntryType::HardLink)
                           .file("dev", "")
                           .done();
    std::uint8_t* device = with_device.data() + 4 * tar::kBlock;  // after 2 + 1 + 1 blocks
    device[156] = '3';                                            // a character device
    reseal(device);
    auto fine = files::put_tar(client, target.string(), bytes_source(with_device));
    REQUIRE_MESSAGE(fine.has_value(), (fine ? "" : fine.error().to_string()));
    CHECK(fine->entries == 3);
    CHECK(fine->skipped == 1);
    CHECK(fine->bytes == with_device.size());  // the archive bytes sent
    CHECK(slurp(target / "sub" / "up") == "real");
    CHECK(fs::hard_link_count(target / "sub" / "real") == 2);
    CHECK(fs::equivalent(target / "sub" / "real", target / "sub" / "hard"));
}

TEST_CASE_FIXTURE(TarFixture, "the host refuses a guest archive with a link out of the target") {
    const fs::path guest = work.path / "guest";
    fs::create_directories(guest);
    spit(guest / "a", "a");
    fs::create_symlink("/etc/passwd", guest / "z-passwd");
    const fs::path local = work.path / "local";
    auto r = files::get_tree(client, guest.string(), local.string());
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("absolute") != std::string::npos);
    CHECK_FALSE(fs::exists(local / "z-passwd"));
    CHECK(client.health().has_value());  // the rest of the archive was drained
}

TEST_CASE("the extractor removes a file an error cut short") {
    TempDir dir;
    UniqueFd root(::open(dir.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    {
        files::TreeExtractor extractor(root.get(), {});
        tar::TarReader reader(extractor);
        auto archive = ArchiveBuilder().file("half", std::string(4000, 'h')).done();
        REQUIRE(reader.feed(std::span(archive).first(2000)));
        CHECK(fs::exists(dir.path / "half"));
    }
    CHECK_FALSE(fs::exists(dir.path / "half"));
}

TEST_CASE("add_content: exactly the header's size goes in, padded with zeros or cut") {
    for (const auto& [given, want] : {std::pair<std::string, std::string>{"exact", "exact"},
                                      {"sh", std::string("sh") + std::string(3, '\0')},
                                      {"too long by far", "too l"}}) {
        std::vector<std::uint8_t> archive;
        tar::TarWriter writer(
            [&](std::span<const std::uint8_t> bytes) -> Result<void> {
                archive.insert(archive.end(), bytes.begin(), bytes.end());
                return ok();
            },
            1000);
        tar::Entry entry{"f", tar::EntryType::File, 0644, 0, 0, 5, 0, 0, {}};
        REQUIRE(writer.add_content(entry, [&given = given](const tar::ByteSink& sink) {
            // In two pieces, as a reader of a disk gives them.
            const auto* data = reinterpret_cast<const std::uint8_t*>(given.data());
            if (auto r = sink(std::span(data, given.size() / 2)); !r) {
                return r;
            }
            return sink(std::span(data + given.size() / 2, given.size() - given.size() / 2));
        }));
        REQUIRE(writer.add_file(tar::Entry{"g", tar::EntryType::File, 0644, 0, 0, 0, 0, 0, {}}, -1));
        REQUIRE(writer.finish());
        CHECK(archive.size() % tar::kBlock == 0);
        struct Content final : tar::TarEntryHandler {
            std::vector<std::string> files;
            Result<void> begin_entry(const tar::Entry&) override {
                files.emplace_back();
                return ok();
            }
            Result<void> entry_data(std::span<const std::uint8_t> b) override {
                files.back().append(reinterpret_cast<const char*>(b.data()), b.size());
                return ok();
            }
            Result<void> end_entry() override { return ok(); }
        } content;
        tar::TarReader reader(content);
        REQUIRE(reader.feed(archive));
        REQUIRE(reader.finish());
        REQUIRE(content.files.size() == 2);
        CHECK(content.files[0] == want);
        CHECK(content.files[1].empty());
    }
    // A producer's error ends the entry with it.
    tar::TarWriter failing([](std::span<const std::uint8_t>) -> Result<void> { return ok(); }, 512);
    tar::Entry entry{"f", tar::EntryType::File, 0644, 0, 0, 5, 0, 0, {}};
    auto r =
        failing.add_content(entry, [](const tar::ByteSink&) -> Result<void> { return make_error("broken"); });
    REQUIRE_FALSE(r);
    CHECK(r.error().message == "broken");
}
