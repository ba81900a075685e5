# images/rootfs/slim.sh: the rootfs-slim recipe for images/build (sourced).
# shellcheck shell=bash
#
# The slim guest root disk (sbxd's image `slim`, and the one the tests,
# benchmarks and scripts/demo boot): the rootfs-base tree
# (images/rootfs/base.sh: Debian 12 minbase, systemd, python3, sshd, ...)
# made into an ext4 image by images/rootfs/image.sh (files/, the user,
# units, sbx-agent, mkfs.ext4 -d). The agent's default user is root.
# Needs root.
#
# Cache entry: rootfs.ext4.

load_recipe rootfs-base
# shellcheck source=images/rootfs/image.sh
source "$IMAGES_DIR/rootfs/image.sh"

# Apparent size of the image (sparse: only the ~250 MiB in use take space).
ROOTFS_SLIM_SIZE=2G

rootfs_slim_inputs() { rootfs_image_inputs rootfs-base "$ROOTFS_SLIM_SIZE" "$IMAGES_DIR/rootfs/slim.sh"; }

rootfs_slim_artifact() { echo rootfs.ext4; }

rootfs_slim_build() { rootfs_image_build "$1" "$2" rootfs-slim rootfs-base "$ROOTFS_SLIM_SIZE" sudo root; }
