// libFuzzer target: arbitrary bytes as the tar archive a hostile guest
// sends for `sbx scp -r` / get_tree, fed in pieces of varying sizes (as
// DATA frames arrive) to TarReader and a TreeExtractor with the host's
// options (owners not kept, set-id bits dropped), below a fresh directory
// inside a fence directory. Afterwards nothing may exist outside the root,
// nothing inside may carry a set-id bit, and every symlink must be
// relative and resolve (lexically) below the root; then the tree is
// removed without following links.
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "base/unique_fd.hpp"
#include "guest-agent/files/tar_reader.hpp"
#include "guest-agent/files/tree_extractor.hpp"

namespace {

namespace fs = std::filesystem;
using namespace sbx::agent;

void check(bool ok) {
    if (!ok) {
        __builtin_trap();
    }
}

int remove_entry(const char* path, const struct stat*, int, FTW*) { return ::remove(path); }

void remove_tree(const std::string& path) { ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

// One fence directory for the run, removed at exit.
const std::string& fence() {
    struct Fence {
        Fence() {
            char tmpl[] = "/tmp/sbx-fuzz-tar-XXXXXX";
            if (::mkdtemp(tmpl) == nullptr) {
                std::abort();
            }
            path = tmpl;
        }
        ~Fence() { remove_tree(path); }
        std::string path;
    };
    static const Fence fence;
    return fence.path;
}

// A symlink's target, taken from its directory, stays below the root.
bool stays_below(const fs::path& link_dir_rel, const std::string& target) {
    if (target.empty() || target.front() == '/') {
        return false;
    }
    std::vector<std::string> parts;
    for (const auto& p : link_dir_rel) {
        if (!p.empty() && p != ".") {
            parts.push_back(p.string());
        }
    }
    for (const auto& p : fs::path(target)) {
        const std::string s = p.string();
        if (s.empty() || s == ".") {
            continue;
        }
        if (s == "..") {
            if (parts.empty()) {
                return false;
            }
            parts.pop_back();
        } else {
            parts.push_back(s);
        }
    }
    return true;
}

void check_tree(const std::string& root) {
    for (const auto& entry : fs::directory_iterator(fence())) {
        check(entry.path() == root);  // nothing beside the root
    }
    for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
        struct stat st {};
        check(::lstat(it->path().c_str(), &st) == 0);
        check((st.st_mode & (S_ISUID | S_ISGID)) == 0);
        check(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode));
        if (S_ISLNK(st.st_mode)) {
            const auto rel = fs::relative(it->path().parent_path(), root);
            check(stays_below(rel, fs::read_symlink(it->path()).string()));
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0 || size > (1 << 20)) {
        return 0;
    }
    // The first byte sets the piece size: 1..256 bytes, or all at once.
    const std::size_t piece = data[0] == 0 ? size : data[0];
    const std::span<const std::uint8_t> archive(data + 1, size - 1);

    const std::string root = fence() + "/root";
    check(::mkdir(root.c_str(), 0700) == 0);
    {
        auto fd = sbx::UniqueFd::open(root, O_RDONLY | O_DIRECTORY);
        check(fd.has_value());
        files::TreeExtractor extractor(fd->get(), files::ExtractOptions{std::nullopt, std::nullopt, 01777});
        tar::TarReader reader(extractor);
        bool ok = true;
        for (std::size_t at = 0; ok && at < archive.size(); at += piece) {
            ok = reader.feed(archive.subspan(at, std::min(piece, archive.size() - at))).has_value();
        }
        if (ok && reader.finish()) {
            (void)extractor.finish();
        }
    }
    // Owner-only directories the archive made must not stop the checks or the clean-up.
    for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
        if (it->is_directory() && !it->is_symlink()) {
            ::chmod(it->path().c_str(), 0700);
        }
    }
    check_tree(root);
    remove_tree(root);
    return 0;
}
