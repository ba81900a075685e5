// find_boot_image on an images/build-shaped folder of fake entries, and the
// driver's default image (sbxd --default-image).
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "host-tools/sbxd/vmm/boot_images.hpp"
#include "host-tools/sbxd/vmm/driver_test_fixture.hpp"

using namespace sbx::sbxd;
using namespace sbx::sbxd::testing;
using namespace std::chrono_literals;

namespace {

void make_entry(const std::string& dir, const std::string& entry, const std::string& file,
                bool complete = true) {
    write_file(dir + "/" + entry + "/" + file, "image");
    if (complete) {
        write_file(dir + "/" + entry + "/.complete", "");
    }
}

}  // namespace

TEST_CASE("boot images: the newest complete entry of each target") {
    TempDir dir{"sbxd-boot-images-test"};
    CHECK(find_boot_image(dir.path(), "default").error().code == "not_found");
    make_images(dir.path());
    write_file(dir.path() + "/rootfs-full/cccc/rootfs.ext4", "half built");  // no .complete
    auto image = find_boot_image(dir.path(), "default");
    REQUIRE(image.has_value());
    CHECK(image->kernel == dir.path() + "/kernel/aaaa/vmlinux");
    CHECK(image->disk == dir.path() + "/rootfs-full/bbbb/rootfs.ext4");
    std::this_thread::sleep_for(20ms);
    make_entry(dir.path(), "rootfs-full/dddd", "rootfs.ext4");
    CHECK(find_boot_image(dir.path(), "default")->disk == dir.path() + "/rootfs-full/dddd/rootfs.ext4");
    CHECK(find_boot_image(dir.path(), "python").error().code == "not_found");
}

TEST_CASE("boot images: default is the full image, slim the small one, each from its own recipe") {
    TempDir dir{"sbxd-boot-images-test"};
    make_entry(dir.path(), "kernel/k1", "vmlinux");
    // The cache folder of the old rootfs recipe (the small image before
    // rootfs-slim) is neither.
    make_entry(dir.path(), "rootfs/old", "rootfs.ext4");
    auto none = find_boot_image(dir.path(), "default");
    REQUIRE_FALSE(none.has_value());
    CHECK(none.error().code == "not_found");
    CHECK(none.error().message.find("run images/build rootfs)") != std::string::npos);
    auto no_slim = find_boot_image(dir.path(), "slim");
    REQUIRE_FALSE(no_slim.has_value());
    CHECK(no_slim.error().message.find("run images/build rootfs-slim)") != std::string::npos);

    make_entry(dir.path(), "rootfs-slim/s1", "rootfs.ext4");
    CHECK_FALSE(find_boot_image(dir.path(), "default").has_value());
    auto slim = find_boot_image(dir.path(), "slim");
    REQUIRE(slim.has_value());
    CHECK(slim->disk == dir.path() + "/rootfs-slim/s1/rootfs.ext4");
    CHECK(slim->kernel == dir.path() + "/kernel/k1/vmlinux");

    make_entry(dir.path(), "rootfs-full/f1", "rootfs.ext4");
    CHECK(find_boot_image(dir.path(), "default")->disk == dir.path() + "/rootfs-full/f1/rootfs.ext4");
    CHECK(find_boot_image(dir.path(), "slim")->disk == dir.path() + "/rootfs-slim/s1/rootfs.ext4");
}

TEST_CASE("boot images: an entry without its file, or a disk without a kernel, is not_found") {
    TempDir dir{"sbxd-boot-images-test"};
    make_entry(dir.path(), "rootfs-slim/s1", "rootfs.ext4");
    auto no_kernel = find_boot_image(dir.path(), "slim");
    REQUIRE_FALSE(no_kernel.has_value());
    CHECK(no_kernel.error().message.find("run images/build vmlinux)") != std::string::npos);
    make_entry(dir.path(), "kernel/k1", "bzImage");  // complete, but no vmlinux
    CHECK_FALSE(find_boot_image(dir.path(), "slim").has_value());
    make_entry(dir.path(), "kernel/k2", "vmlinux");
    CHECK(find_boot_image(dir.path(), "slim").has_value());
}

TEST_CASE("boot images: the known names; an unknown one lists them") {
    CHECK(boot_image_names() == std::vector<std::string>{"default", "slim"});
    CHECK(check_boot_image_name("default").has_value());
    CHECK(check_boot_image_name("slim").has_value());
    for (const char* name : {"minimal", "rootfs", "", "Default"}) {
        auto bad = check_boot_image_name(name);
        REQUIRE_FALSE(bad.has_value());
        CHECK(bad.error().code == "not_found");
        CHECK(bad.error().message.find("(images: default, slim)") != std::string::npos);
    }
    TempDir dir{"sbxd-boot-images-test"};
    auto unknown = find_boot_image(dir.path(), "minimal");
    REQUIRE_FALSE(unknown.has_value());
    CHECK(unknown.error().message == "no image or snapshot named 'minimal' (images: default, slim)");
}

TEST_CASE("a create that names no image boots the driver's default image (sbxd --default-image)") {
    Fixture fx;
    make_entry(fx.images, "rootfs-slim/s1", "rootfs.ext4");
    const std::string fake = fx.dir.path() + "/fake-vmm";
    write_file(fake, "#!/bin/sh\nexit 1\n", 0755);  // fails at once: the create's record is what counts
    DriverConfig config = fx.config(fake);
    config.default_image = "slim";
    VmmDriver driver(*fx.store, config);
    auto created = driver.create(fx.spec());
    REQUIRE_FALSE(created.has_value());
    CHECK(created.error().code == "no_ready_machine");
    auto all = fx.store->list_sandboxes({});
    REQUIRE(all->size() == 1);
    CHECK(all->front().from == "slim");  // the name, not "default": a later boot takes the same image
    const std::string disk = read_file(SandboxFiles(fx.state, all->front().id).disk());
    REQUIRE(disk.size() > 64);
    CHECK(disk.substr(be64(disk, 8), be64(disk, 16) >> 32) == fx.images + "/rootfs-slim/s1/rootfs.ext4");

    CreateSpec named = fx.spec();
    named.request.from = "default";
    CHECK(driver.create(named).error().code == "no_ready_machine");  // named: the full image, also built
}

TEST_CASE("a driver whose default image is no image refuses creates that name none") {
    Fixture fx;
    DriverConfig config = fx.config(fx.dir.path() + "/no-vmm");
    config.default_image = "nope";
    VmmDriver driver(*fx.store, config);
    auto refused = driver.create(fx.spec());
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code == "not_found");
    CHECK(refused.error().message.find("(images: default, slim)") != std::string::npos);
    CHECK(fx.store->list_sandboxes({})->empty());
}
