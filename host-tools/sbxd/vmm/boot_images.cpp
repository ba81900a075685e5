#include "host-tools/sbxd/vmm/boot_images.hpp"

#include <array>
#include <filesystem>

#include <fmt/ranges.h>

namespace sbx::sbxd {

namespace {

namespace fs = std::filesystem;

// An images/build artifact: the cache folder of its recipe, the file in an
// entry, and the images/build target that makes it.
struct Artifact {
    std::string_view recipe;
    std::string_view file;
    std::string_view target;
};

struct NamedImage {
    std::string_view name;
    Artifact disk;
};

constexpr Artifact kKernel{"kernel", "vmlinux", "vmlinux"};
constexpr std::array kImages{
    NamedImage{kDefaultImageName, {"rootfs-full", "rootfs.ext4", "rootfs"}},
    NamedImage{"slim", {"rootfs-slim", "rootfs.ext4", "rootfs-slim"}},
};

const NamedImage* find_named(std::string_view name) {
    for (const auto& image : kImages) {
        if (image.name == name) {
            return &image;
        }
    }
    return nullptr;
}

// The artifact's file in the newest complete entry of its recipe.
Result<std::string> newest_artifact(const std::string& images_dir, const Artifact& artifact) {
    const fs::path dir = fs::path(images_dir) / artifact.recipe;
    std::error_code ec;
    fs::path best;
    fs::file_time_type best_time{};
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const fs::path marker = it->path() / ".complete";
        const fs::path file = it->path() / artifact.file;
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
        return make_coded_error("not_found", "no complete {} entry with {} in {} (run images/build {})",
                                artifact.recipe, artifact.file, dir.string(), artifact.target);
    }
    return fs::absolute(best).string();
}

}  // namespace

std::vector<std::string> boot_image_names() {
    std::vector<std::string> names;
    for (const auto& image : kImages) {
        names.emplace_back(image.name);
    }
    return names;
}

Result<void> check_boot_image_name(const std::string& name) {
    if (find_named(name) == nullptr) {
        return make_coded_error("not_found", "no image named '{}' (images: {})", name,
                                fmt::join(boot_image_names(), ", "));
    }
    return ok();
}

Result<BootImage> find_boot_image(const std::string& images_dir, const std::string& name) {
    const NamedImage* image = find_named(name);
    if (image == nullptr) {
        return make_coded_error("not_found", "no image or snapshot named '{}' (images: {})", name,
                                fmt::join(boot_image_names(), ", "));
    }
    auto kernel = newest_artifact(images_dir, kKernel);
    if (!kernel) {
        return kernel.error();
    }
    auto disk = newest_artifact(images_dir, image->disk);
    if (!disk) {
        return disk.error();
    }
    return BootImage{*kernel, *disk};
}

}  // namespace sbx::sbxd
