// Where sbxd finds what it boots: the images/build cache (images/README.md,
// "Cache"), each recipe's entries in <recipe>/<key>/ with a .complete
// marker. The newest complete entry of a recipe is the one in use. Image
// names map to root disks: "default" is the full image (images/build
// rootfs, recipe rootfs-full), "slim" the small Debian one (images/build
// rootfs-slim). The minimal image is an initramfs, not a disk: sbxd's
// sandboxes are qcow2 overlays on a root disk, so it is not one of them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace sbx::sbxd {

struct BootImage {
    std::string kernel;  // kernel/<key>/vmlinux (ELF with the PVH note)
    std::string disk;    // the raw ext4 root disk, read only to sbxd
};

// The image sbxd boots when a create names none (sbxd --default-image).
inline constexpr std::string_view kDefaultImageName = "default";

// The names of the images sbxd knows ("default", "slim").
[[nodiscard]] std::vector<std::string> boot_image_names();

// "not_found" for a name that is no image, listing the known ones.
[[nodiscard]] Result<void> check_boot_image_name(const std::string& name);

// "not_found" naming what is missing (an unknown image name included, and
// the images/build target that makes a missing entry).
[[nodiscard]] Result<BootImage> find_boot_image(const std::string& images_dir, const std::string& name);

}  // namespace sbx::sbxd
