# images/rootfs/full.sh: the rootfs-full recipe for images/build (sourced):
# the default image (target `rootfs`, sbxd's image `default`).
# shellcheck shell=bash
#
# The full guest root disk: the rootfs-full-base tree (images/rootfs/full-base.sh:
# rootfs-base plus Docker, language toolchains, Chromium, the coding
# agents), made into an ext4 image by the same steps as the slim image
# (images/rootfs/image.sh, rootfs_image_build: files/, the user, units,
# sbx-agent, mkfs.ext4 -d), the user also in group docker, and the
# agent's default user `user` (passwordless sudo). Needs root.
#
# Cache entry: rootfs.ext4.

load_recipe rootfs-full-base
# shellcheck source=images/rootfs/image.sh
source "$IMAGES_DIR/rootfs/image.sh"

# Apparent size of the image (sparse: only the ~3.5 GiB in use take space).
# The tree is 3.5 GiB (3540 MiB measured), so 6G leaves 2.4 GiB free before
# the guest grows the file system to its disk (sbx-growfs.service). sbxd
# never makes a disk smaller than the image, so above 8G every sandbox's
# disk would outgrow the default diskGib (8).
ROOTFS_FULL_SIZE=6G

rootfs_full_inputs() {
    rootfs_image_inputs rootfs-full-base "$ROOTFS_FULL_SIZE" "$IMAGES_DIR/rootfs/full.sh"
}

rootfs_full_artifact() { echo rootfs.ext4; }

rootfs_full_build() {
    rootfs_image_build "$1" "$2" rootfs-full rootfs-full-base "$ROOTFS_FULL_SIZE" sudo,docker user
}
