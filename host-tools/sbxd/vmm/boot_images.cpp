#include "host-tools/sbxd/vmm/boot_images.hpp"

#include <filesystem>

namespace sbx::sbxd {

namespace {

namespace fs = std::filesystem;

// The file `artifact` of the newest complete entry of `target`.
Result<std::string> newest_artifact(const std::string& images_dir, const std::string& target,
                                    const std::string& artifact) {
    std::error_code ec;
    fs::path best;
    fs::file_time_type best_time{};
    for (fs::directory_iterator it(fs::path(images_dir) / target, ec), end; !ec && it != end;
         it.increment(ec)) {
        const fs::path marker = it->path() / ".complete";
        const fs::path file = it->path() / artifact;
        std::error_code e1, e2;
        auto when = fs::last_write_time(marker, e1);
        if (e1 || !fs::is_regular_file(file, e2) || e2) {
            continue;
        }
        if (best.empty() || when > best_time) {
            best = file;
            best_time = when;
        }
    }
    if (best.empty()) {
        return make_coded_error("not_found", "no complete {} entry with {} in {} (run images/build {})", target,
                                artifact, (fs::path(images_dir) / target).string(), target);
    }
    return fs::absolute(best).string();
}

}  // namespace

Result<BootImage> find_boot_image(const std::string& images_dir, const std::string& name) {
    if (name != "default") {
        return make_coded_error("not_found", "no image or snapshot named '{}' (images: default)", name);
    }
    auto kernel = newest_artifact(images_dir, "kernel", "vmlinux");
    if (!kernel) {
        return kernel.error();
    }
    auto disk = newest_artifact(images_dir, "rootfs", "rootfs.ext4");
    if (!disk) {
        return disk.error();
    }
    return BootImage{*kernel, *disk};
}

}  // namespace sbx::sbxd
