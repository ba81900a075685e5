// DiskFs on ext4 images made here with mkfs.ext4 -d, as images/build
// rootfs makes the root disk, read raw and through a qcow2 overlay written
// with our own qcow2 library; then crafted and corrupted disks.
#include "host-tools/sbxd/diskfs/disk_fs.hpp"

#include <doctest/doctest.h>
#include <ext2fs/ext2fs.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "devices/virtio/blk/qcow2/qcow2_create.hpp"
#include "devices/virtio/blk/qcow2/qcow2_image.hpp"

namespace sbx::diskfs {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

struct TempDir {
    std::string path;
    TempDir() {
        const char* tmp = std::getenv("TMPDIR");
        path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/sbx-diskfs-test-XXXXXX";
        REQUIRE(::mkdtemp(path.data()) != nullptr);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir() { fs::remove_all(path); }
    [[nodiscard]] std::string file(const std::string& name) const { return path + "/" + name; }
};

void put(const std::string& path, std::string_view content) {
    std::ofstream out(path, std::ios::binary);
    out << content;
    REQUIRE(out.good());
}

std::string big_content() {
    std::string s(300 * 1024 + 17, '\0');
    for (std::size_t i = 0; i < s.size(); ++i) {
        s[i] = static_cast<char>(i * 131 + (i >> 9));
    }
    return s;
}

bool have_mkfs() { return std::system("command -v mkfs.ext4 >/dev/null 2>&1 || test -x /sbin/mkfs.ext4") == 0; }

// The tree below, as mkfs.ext4 -d copies it into `image` (16 MiB, 4 KiB
// blocks, a journal: the defaults images/build rootfs uses).
void make_image(const TempDir& dir, const std::string& image) {
    const std::string root = dir.file("tree");
    fs::create_directories(root + "/dir/sub");
    put(root + "/hello.txt", "hello base!!\n");
    ::chmod((root + "/hello.txt").c_str(), 0640);
    const timespec times[2] = {{1700000000, 0}, {1700000000, 0}};
    REQUIRE(::utimensat(AT_FDCWD, (root + "/hello.txt").c_str(), times, 0) == 0);
    put(root + "/dir/sub/file.bin", big_content());
    fs::create_directories(root + "/many");
    for (int i = 0; i < 200; ++i) {
        put(root + "/many/entry-with-a-longish-name-" + std::to_string(i), std::to_string(i));
    }
    fs::create_symlink("dir/sub/file.bin", root + "/link-rel");
    fs::create_symlink("/hello.txt", root + "/dir/abs");
    fs::create_symlink("../hello.txt", root + "/dir/up");
    fs::create_symlink("../dir/../dir/./sub", root + "/dir/subagain");
    fs::create_symlink("dir", root + "/dirlink");
    fs::create_symlink("loop2", root + "/loop1");
    fs::create_symlink("/loop1", root + "/loop2");
    fs::create_symlink("/../../../../etc/passwd", root + "/escape");
    fs::create_symlink(std::string(200, 'x') + "/target", root + "/longlink");  // a slow symlink
    const std::string cmd = "PATH=$PATH:/sbin:/usr/sbin mkfs.ext4 -q -F -b 4096 -d " + root + " " + image +
                            " 16M >/dev/null 2>&1";
    REQUIRE(std::system(cmd.c_str()) == 0);
}

// libext2fs on the raw image, for the test's own look at where things are.
struct RawFs {
    ext2_filsys fs = nullptr;
    explicit RawFs(const std::string& image, int flags = 0) {
        REQUIRE(ext2fs_open(image.c_str(), flags | EXT2_FLAG_64BITS, 0, 0, unix_io_manager, &fs) == 0);
    }
    RawFs(const RawFs&) = delete;
    RawFs& operator=(const RawFs&) = delete;
    ~RawFs() { ext2fs_close_free(&fs); }
    ext2_ino_t ino(const char* name) const {
        ext2_ino_t out = 0;
        REQUIRE(ext2fs_namei(fs, EXT2_ROOT_INO, EXT2_ROOT_INO, name, &out) == 0);
        return out;
    }
    // The byte offset of the file's first data block.
    std::uint64_t first_block_offset(const char* name) const {
        blk64_t physical = 0;
        REQUIRE(ext2fs_bmap2(fs, ino(name), nullptr, nullptr, 0, 0, nullptr, &physical) == 0);
        REQUIRE(physical != 0);
        return physical * fs->blocksize;
    }
    // The byte offset of the inode table block that holds `ino`.
    std::uint64_t inode_block_offset(ext2_ino_t ino) const {
        const dgrp_t group = (ino - 1) / fs->super->s_inodes_per_group;
        const std::uint64_t index = (ino - 1) % fs->super->s_inodes_per_group;
        const std::uint64_t table = ext2fs_inode_table_loc(fs, group) * fs->blocksize;
        return table + index * EXT2_INODE_SIZE(fs->super) / fs->blocksize * fs->blocksize;
    }
};

void scribble(const std::string& image, std::uint64_t offset, std::size_t len, unsigned seed) {
    std::mt19937 rng(seed);
    Bytes junk(len);
    for (auto& b : junk) {
        b = static_cast<std::uint8_t>(rng());
    }
    int fd = ::open(image.c_str(), O_WRONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::pwrite(fd, junk.data(), len, static_cast<off_t>(offset)) == static_cast<ssize_t>(len));
    ::close(fd);
}

std::string read_all(DiskFs& disk, std::string_view path, Result<std::uint64_t>* result = nullptr) {
    std::string out;
    auto r = disk.read(path, [&](std::span<const std::uint8_t> data) -> Result<void> {
        CHECK(data.size() <= 256 * 1024);
        out.append(reinterpret_cast<const char*>(data.data()), data.size());
        return {};
    });
    if (result != nullptr) {
        *result = r;
    } else {
        REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
        CHECK(*r == out.size());
    }
    return out;
}

template <typename T>
std::string code_of(const Result<T>& r) {
    return r ? std::string("(ok)") : r.error().code;
}

}  // namespace

TEST_CASE("an ext4 disk read through a qcow2 overlay sees the overlay's writes") {
    if (!have_mkfs()) {
        MESSAGE("skipped: mkfs.ext4 (e2fsprogs) is not installed");
        return;
    }
    TempDir dir;
    const std::string base = dir.file("base.ext4");
    const std::string overlay = dir.file("disk.qcow2");
    make_image(dir, base);
    REQUIRE(qcow2::create_overlay(overlay, base, qcow2::BackingFormat::Raw, 0).has_value());
    {
        // The guest rewrote hello.txt in place: only the overlay has it.
        RawFs raw(base);
        const std::uint64_t at = raw.first_block_offset("hello.txt");
        auto file = UniqueFd::open(overlay, O_RDWR);
        REQUIRE(file.has_value());
        auto image = qcow2::Image::open(std::move(*file), overlay, true, qcow2::BackingFiles::Follow);
        REQUIRE(image.has_value());
        const std::string text = "HELLO OVERLY\n";  // the same 13 bytes as the base's
        REQUIRE((*image)->write(at, std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size())));
        REQUIRE((*image)->flush());
    }

    auto disk = DiskFs::open(overlay);
    REQUIRE_MESSAGE(disk.has_value(), disk.error().to_string());
    CHECK(read_all(**disk, "/hello.txt") == "HELLO OVERLY\n");
    auto base_disk = DiskFs::open(base);  // a raw disk opens too
    REQUIRE(base_disk.has_value());
    CHECK(read_all(**base_disk, "/hello.txt") == "hello base!!\n");

    SUBCASE("stat") {
        auto st = (*disk)->stat("/hello.txt", false);
        REQUIRE(st.has_value());
        CHECK(st->kind == Kind::File);
        CHECK(st->size == 13);
        CHECK(st->mode == 0640);
        CHECK(st->mtime == 1700000000);
        CHECK(st->uid == ::getuid());
        CHECK(st->gid == ::getgid());
        auto root = (*disk)->stat("/", false);
        REQUIRE(root.has_value());
        CHECK(root->kind == Kind::Dir);
        auto link = (*disk)->stat("/link-rel", false);
        REQUIRE(link.has_value());
        CHECK(link->kind == Kind::Symlink);
        CHECK(link->target == "dir/sub/file.bin");
        CHECK(link->size == 16);
        auto followed = (*disk)->stat("/link-rel", true);
        REQUIRE(followed.has_value());
        CHECK(followed->kind == Kind::File);
        CHECK(followed->size == big_content().size());
        auto slow = (*disk)->stat("/longlink", false);
        REQUIRE(slow.has_value());
        CHECK(slow->target == std::string(200, 'x') + "/target");
        CHECK(code_of((*disk)->stat("/nope", false)) == code::kNotFound);
        CHECK(code_of((*disk)->stat("/hello.txt/x", false)) == code::kNotADirectory);
        CHECK(code_of((*disk)->stat("relative", false)) == code::kBadPath);
        CHECK(code_of((*disk)->stat("/" + std::string(300, 'a'), false)) == code::kBadPath);
        CHECK(code_of((*disk)->stat(std::string(5000, '/'), false)) == code::kBadPath);
    }

    SUBCASE("read streams a file bigger than a chunk, through symlinks") {
        CHECK(read_all(**disk, "/dir/sub/file.bin") == big_content());
        CHECK(read_all(**disk, "/link-rel") == big_content());         // relative
        CHECK(read_all(**disk, "/dir/abs") == "HELLO OVERLY\n");        // absolute: the guest's root
        CHECK(read_all(**disk, "/dir/up") == "HELLO OVERLY\n");         // ..
        CHECK(read_all(**disk, "/dir/subagain/file.bin") == big_content());
        CHECK(read_all(**disk, "/dirlink/../hello.txt") == "HELLO OVERLY\n");
        CHECK(read_all(**disk, "/../../hello.txt") == "HELLO OVERLY\n");  // the root's .. is the root
        Result<std::uint64_t> r{0};
        read_all(**disk, "/loop1", &r);
        CHECK(code_of(r) == code::kSymlinkLoop);
        read_all(**disk, "/escape", &r);  // /etc/passwd of the guest (none), never the host's
        CHECK(code_of(r) == code::kNotFound);
        read_all(**disk, "/dir", &r);
        CHECK(code_of(r) == code::kNotAFile);
        read_all(**disk, "/longlink", &r);
        CHECK(code_of(r) == code::kNotFound);
        // A sink's error stops the read.
        auto stopped = (*disk)->read("/dir/sub/file.bin", [](std::span<const std::uint8_t>) -> Result<void> {
            return make_coded_error("cancelled", "client went away");
        });
        CHECK(code_of(stopped) == "cancelled");
    }

    SUBCASE("list") {
        auto entries = (*disk)->list("/dir");
        REQUIRE(entries.has_value());
        std::vector<std::string> names;
        for (const auto& e : *entries) {
            names.push_back(e.name);
        }
        CHECK(names == std::vector<std::string>{"abs", "sub", "subagain", "up"});
        CHECK((*entries)[0].stat.kind == Kind::Symlink);
        CHECK((*entries)[0].stat.target.empty());
        CHECK((*entries)[1].stat.kind == Kind::Dir);
        auto via_link = (*disk)->list("/dirlink");
        REQUIRE(via_link.has_value());
        CHECK(via_link->size() == 4);
        auto root = (*disk)->list("/");
        REQUIRE(root.has_value());
        CHECK(root->front().name == "dir");
        CHECK(std::any_of(root->begin(), root->end(), [](const DirEntry& e) {
            return e.name == "hello.txt" && e.stat.kind == Kind::File && e.stat.size == 13;
        }));
        auto many = (*disk)->list("/many");  // a directory of many blocks
        REQUIRE(many.has_value());
        CHECK(many->size() == 200);
        CHECK(std::is_sorted(many->begin(), many->end(),
                             [](const DirEntry& x, const DirEntry& y) { return x.name < y.name; }));
        CHECK(read_all(**disk, "/many/entry-with-a-longish-name-145") == "145");
        CHECK(code_of((*disk)->list("/hello.txt")) == code::kNotADirectory);
        CHECK(code_of((*disk)->list("/loop2")) == code::kSymlinkLoop);
    }

    SUBCASE("by inode: a walk from list entries without resolving paths") {
        auto root = (*disk)->stat("/", true);
        REQUIRE(root.has_value());
        CHECK(root->ino == EXT2_ROOT_INO);
        auto top = (*disk)->list_at(root->ino, "/");
        REQUIRE(top.has_value());
        auto find = [](const std::vector<DirEntry>& entries, std::string_view name) {
            auto it = std::find_if(entries.begin(), entries.end(),
                                   [&](const DirEntry& e) { return e.name == name; });
            REQUIRE(it != entries.end());
            return it->stat;
        };
        auto dir_entries = (*disk)->list_at(find(*top, "dir").ino, "/dir");
        REQUIRE(dir_entries.has_value());
        CHECK(dir_entries->size() == 4);
        auto sub = (*disk)->list_at(find(*dir_entries, "sub").ino, "/dir/sub");
        REQUIRE(sub.has_value());
        std::string content;
        auto read =
            (*disk)->read_at(find(*sub, "file.bin").ino, "/dir/sub/file.bin",
                             [&](std::span<const std::uint8_t> data) -> Result<void> {
                                 content.append(reinterpret_cast<const char*>(data.data()), data.size());
                                 return {};
                             });
        REQUIRE(read.has_value());
        CHECK(content == big_content());
        auto link = (*disk)->stat_at(find(*dir_entries, "up").ino, "/dir/up");
        REQUIRE(link.has_value());
        CHECK(link->target == "../hello.txt");
        CHECK(code_of((*disk)->list_at(find(*top, "hello.txt").ino, "/hello.txt")) == code::kNotADirectory);
        CHECK(code_of((*disk)->read_at(find(*top, "dir").ino, "/dir",
                                       [](auto) -> Result<void> { return {}; })) == code::kNotAFile);
        CHECK(code_of((*disk)->stat_at(0, "?")) == code::kCorrupt);
        CHECK(code_of((*disk)->list_at(0xffffffffu, "?")) == code::kCorrupt);
    }
}

TEST_CASE("disks that are not one whole-disk ext4 file system are refused") {
    TempDir dir;
    const std::string image = dir.file("disk.img");
    {
        std::ofstream out(image, std::ios::binary);
        std::string mbr(1 << 20, '\0');
        mbr[510] = '\x55';
        mbr[511] = '\xaa';
        out << mbr;
    }
    auto partitioned = DiskFs::open(image);
    CHECK(code_of(partitioned) == code::kUnsupported);
    CHECK(partitioned.error().message.find("partition table") != std::string::npos);
    scribble(image, 510, 2, 1);
    scribble(image, 512, 8, 2);  // not "EFI PART" either
    CHECK(code_of(DiskFs::open(image)) == code::kUnsupported);
    CHECK(code_of(DiskFs::open(dir.file("missing.qcow2"))) == code::kIo);
}

TEST_CASE("corrupt and unrecovered disks give coded errors") {
    if (!have_mkfs()) {
        MESSAGE("skipped: mkfs.ext4 (e2fsprogs) is not installed");
        return;
    }
    TempDir dir;
    const std::string good = dir.file("good.ext4");
    make_image(dir, good);
    auto copy = [&](const std::string& name) {
        const std::string path = dir.file(name);
        REQUIRE(std::system(("cp --sparse=always " + good + " " + path).c_str()) == 0);  // 16 MiB, mostly holes
        return path;
    };

    SUBCASE("random bytes in the superblock, its magic kept") {
        const std::string image = copy("sb.ext4");
        scribble(image, 1024, 56, 7);
        auto disk = DiskFs::open(image);
        CHECK(code_of(disk) == code::kCorrupt);
    }
    SUBCASE("a file system larger than its disk is refused before libext2fs sizes anything by it") {
        const std::string image = copy("huge.ext4");
        const std::uint8_t all_ones[4] = {0xff, 0xff, 0xff, 0xff};
        int fd = ::open(image.c_str(), O_WRONLY | O_CLOEXEC);
        REQUIRE(fd >= 0);
        REQUIRE(::pwrite(fd, all_ones, 4, 1024 + 4) == 4);  // s_blocks_count_lo
        ::close(fd);
        auto disk = DiskFs::open(image);
        CHECK(code_of(disk) == code::kCorrupt);
        CHECK(disk.error().message.find("do not fit") != std::string::npos);
        const std::string cut = copy("cut.ext4");
        REQUIRE(::truncate(cut.c_str(), 8 << 20) == 0);  // half of it
        CHECK(code_of(DiskFs::open(cut)) == code::kCorrupt);
    }
    SUBCASE("random bytes in the inode table") {
        const std::string image = copy("inodes.ext4");
        std::uint64_t at = 0;
        {
            RawFs raw(image);
            at = raw.inode_block_offset(raw.ino("hello.txt"));
        }
        scribble(image, at, 4096, 9);
        auto disk = DiskFs::open(image);
        REQUIRE(disk.has_value());
        CHECK(code_of((*disk)->stat("/hello.txt", false)) == code::kCorrupt);
        Result<std::uint64_t> r{0};
        read_all(**disk, "/hello.txt", &r);
        CHECK(!r.error().code.empty());
    }
    SUBCASE("random blocks anywhere: errors or answers, never a crash") {
        for (unsigned seed = 0; seed < 24; ++seed) {
            const std::string image = copy("fuzz" + std::to_string(seed) + ".ext4");
            std::mt19937 rng(seed);
            for (int i = 0; i < 4; ++i) {
                scribble(image, (rng() % 512) * 4096, 4096, seed * 10 + i);  // the first 2 MiB: metadata
            }
            auto disk = DiskFs::open(image);
            if (!disk) {
                CHECK(!disk.error().code.empty());
                continue;
            }
            for (const char* path : {"/", "/dir", "/hello.txt", "/link-rel", "/dir/abs", "/loop1", "/longlink"}) {
                auto st = (*disk)->stat(path, true);
                CHECK((st.has_value() || !st.error().code.empty()));
                auto list = (*disk)->list(path);
                CHECK((list.has_value() || !list.error().code.empty()));
                Result<std::uint64_t> r{0};
                read_all(**disk, path, &r);
                CHECK((r.has_value() || !r.error().code.empty()));
            }
        }
    }
    SUBCASE("a journal that needs recovery") {
        const std::string image = copy("dirty.ext4");
        {
            RawFs raw(image, EXT2_FLAG_RW);
            ext2fs_set_feature_journal_needs_recovery(raw.fs->super);
            ext2fs_mark_super_dirty(raw.fs);
        }
        auto disk = DiskFs::open(image);
        CHECK(code_of(disk) == code::kNeedsRecovery);
        CHECK(disk.error().message.find("resume") != std::string::npos);
    }
}

}  // namespace sbx::diskfs
