// Where sbxd finds what it boots: the images/build cache (images/README.md,
// "Cache"), each target in <target>/<key>/ with a .complete marker. The
// newest complete entry of a target is the one in use. Image names map to
// root disks: "default" is the rootfs target's rootfs.ext4.
#pragma once

#include <string>

#include "base/result.hpp"

namespace sbx::sbxd {

struct BootImage {
    std::string kernel;  // kernel/<key>/vmlinux (ELF with the PVH note)
    std::string disk;    // the raw ext4 root disk, read only to sbxd
};

// "not_found" naming what is missing (an unknown image name included).
[[nodiscard]] Result<BootImage> find_boot_image(const std::string& images_dir, const std::string& name);

}  // namespace sbx::sbxd
