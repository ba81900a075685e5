#include <doctest/doctest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "devices/device_test_util.hpp"
#include "devices/pci/pci_host.hpp"
#include "devices/pci/pvpanic.hpp"

using namespace sbx;
using namespace sbx::testing;

namespace {

constexpr std::uint64_t kAddress = 0;  // 0xcf8
constexpr std::uint64_t kData = 4;     // 0xcfc

std::uint32_t rd32(BusDevice& d, std::uint64_t offset) {
    std::uint8_t b[4]{};
    d.read(offset, b);
    return b[0] | std::uint32_t{b[1]} << 8 | std::uint32_t{b[2]} << 16 | std::uint32_t{b[3]} << 24;
}

std::uint16_t rd16(BusDevice& d, std::uint64_t offset) {
    std::uint8_t b[2]{};
    d.read(offset, b);
    return static_cast<std::uint16_t>(b[0] | b[1] << 8);
}

void wr32(BusDevice& d, std::uint64_t offset, std::uint32_t v) {
    const std::uint8_t b[4]{static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8),
                            static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 24)};
    d.write(offset, b);
}

std::uint32_t config_address(unsigned bus, unsigned device, unsigned function, unsigned reg) {
    return 0x80000000U | bus << 16 | device << 11 | function << 8 | reg;
}

std::uint32_t config_read(PciHost& host, unsigned device, unsigned reg) {
    wr32(host, kAddress, config_address(0, device, 0, reg));
    return rd32(host, kData);
}

void config_write(PciHost& host, unsigned device, unsigned reg, std::uint32_t value) {
    wr32(host, kAddress, config_address(0, device, 0, reg));
    wr32(host, kData, value);
}

void add_pvpanic(PciHost& host, std::uint16_t port = 0x1000) {
    auto function = PvPanic::pci_function(port);
    REQUIRE(function);
    REQUIRE(host.attach(1, std::move(*function)));
}

}  // namespace

TEST_CASE("the conf1 probe of Linux finds the mechanism and the host bridge") {
    PciHost host;
    wr(host, 3, 0x01);  // outb(0x01, 0xcfb): reaches no register
    CHECK(rd32(host, kAddress) == 0);
    wr32(host, kAddress, 0x80000000);
    CHECK(rd32(host, kAddress) == 0x80000000);
    CHECK(config_read(host, 0, 0x00) == 0x00081b36);          // Red Hat 1b36:0008
    CHECK((config_read(host, 0, 0x08) >> 8) == 0x060000);     // class: host bridge
    CHECK(((config_read(host, 0, 0x0c) >> 16) & 0xff) == 0);  // header type 0, one function
}

TEST_CASE("CONFIG_ADDRESS keeps only its defined bits and takes only dword writes") {
    PciHost host;
    wr32(host, kAddress, 0xffffffff);
    CHECK(rd32(host, kAddress) == 0x80fffffc);
    wr(host, kAddress, 0x00);  // a byte write is not a CONFIG_ADDRESS write
    CHECK(rd32(host, kAddress) == 0x80fffffc);
    CHECK(rd16(host, kAddress) == 0xffff);  // nor is a word read
}

TEST_CASE("nothing answers for an empty slot, another function or bus, or with enable clear") {
    PciHost host;
    add_pvpanic(host);
    CHECK(config_read(host, 2, 0x00) == 0xffffffff);
    CHECK(config_read(host, 31, 0x00) == 0xffffffff);
    wr32(host, kAddress, config_address(0, 1, 1, 0));
    CHECK(rd32(host, kData) == 0xffffffff);
    wr32(host, kAddress, config_address(1, 1, 0, 0));
    CHECK(rd32(host, kData) == 0xffffffff);
    wr32(host, kAddress, config_address(0, 1, 0, 0) & ~0x80000000U);
    CHECK(rd32(host, kData) == 0xffffffff);
    // A write to nothing changes nothing that is there.
    wr32(host, kAddress, config_address(0, 2, 0, 0x04));
    wr32(host, kData, 0x7);
    CHECK(config_read(host, 1, 0x04) == 0);
}

TEST_CASE("pvpanic's function: QEMU's identity, an I/O BAR that sizes and stays put") {
    PciHost host;
    add_pvpanic(host, 0x1000);
    CHECK(config_read(host, 1, 0x00) == 0x00111b36);
    CHECK(config_read(host, 1, 0x08) == (0x088000U << 8 | 1));
    CHECK(config_read(host, 1, 0x10) == 0x1001);  // I/O space, port 0x1000
    // Sizing as Linux does it (__pci_read_base): all ones, read, restore.
    config_write(host, 1, 0x10, 0xffffffff);
    const std::uint32_t mask = config_read(host, 1, 0x10);
    CHECK((mask & 1) == 1);
    CHECK((~(mask & ~0x3U) + 1) == PvPanic::kPortCount);
    config_write(host, 1, 0x10, 0x1001);
    CHECK(config_read(host, 1, 0x10) == 0x1001);
    // The address is the VMM's: another one does not take.
    config_write(host, 1, 0x10, 0x2001);
    CHECK(config_read(host, 1, 0x10) == 0x1001);
    CHECK(config_read(host, 1, 0x14) == 0);                  // BAR 1: none
    CHECK(config_read(host, 1, 0x30) == 0);                  // no expansion ROM
    CHECK(((config_read(host, 1, 0x3c) >> 8) & 0xff) == 0);  // no interrupt pin
    CHECK((config_read(host, 1, 0x04) >> 16) == 0);          // status: no capabilities
}

TEST_CASE("byte and word accesses to CONFIG_DATA select bytes of the dword") {
    PciHost host;
    add_pvpanic(host);
    wr32(host, kAddress, config_address(0, 1, 0, 0x00));
    CHECK(rd16(host, kData) == 0x1b36);
    CHECK(rd16(host, kData + 2) == 0x0011);
    CHECK(rd(host, kData + 1) == 0x1b);
    // Command register: a word write; only the defined bits stick.
    wr32(host, kAddress, config_address(0, 1, 0, 0x04));
    const std::uint8_t command[2]{0xff, 0xff};
    host.write(kData, command);
    CHECK(rd16(host, kData) == 0x0407);
    wr(host, kData + 2, 0xff);  // status: write-1-to-clear of nothing
    CHECK(rd32(host, kData) == 0x0407);
    // Interrupt line: a byte write to offset 0x3c.
    wr32(host, kAddress, config_address(0, 1, 0, 0x3c));
    wr(host, kData, 11);
    CHECK(rd32(host, kData) == 11);
}

TEST_CASE("attach refuses a taken or missing slot; a BAR must be a power of two, aligned") {
    PciHost host;
    add_pvpanic(host);
    auto again = PvPanic::pci_function(0x1010);
    REQUIRE(again);
    CHECK_FALSE(host.attach(1, *again));
    CHECK_FALSE(host.attach(PciHost::kHostBridgeSlot, *again));
    CHECK_FALSE(host.attach(PciHost::kSlots, *again));
    CHECK(host.attach(2, *again));
    CHECK_FALSE(PciFunction::create({}, PciIoBar{0x1000, 12}));
    CHECK_FALSE(PciFunction::create({}, PciIoBar{0x1000, 2}));
    CHECK_FALSE(PciFunction::create({}, PciIoBar{0x1008, 16}));
    CHECK_FALSE(PvPanic::pci_function(0x1004));
}

TEST_CASE("host state round-trips, including a BAR in the middle of sizing") {
    PciHost host;
    add_pvpanic(host);
    config_write(host, 1, 0x04, 0x1);
    config_write(host, 1, 0x3c, 9);
    config_write(host, 1, 0x10, 0xffffffff);  // the address is left selecting BAR 0
    ByteWriter w;
    host.save().encode(w);
    ByteReader r(w.bytes());
    auto decoded = PciHost::State::decode(r);
    REQUIRE(decoded);
    REQUIRE(r.finish("test"));

    PciHost copy;
    add_pvpanic(copy);
    REQUIRE(copy.restore(*decoded));
    CHECK(rd32(copy, kData) == rd32(host, kData));  // the sizing mask, through the restored address
    CHECK(config_read(copy, 1, 0x04) == 0x1);
    CHECK(config_read(copy, 1, 0x3c) == 9);

    PciHost bare;  // only the host bridge: another set of functions
    CHECK_FALSE(bare.restore(*decoded));
    CHECK(rd32(bare, kAddress) == 0);
}

TEST_CASE("host state decode refuses truncation and another version") {
    PciHost host;
    add_pvpanic(host);
    ByteWriter w;
    host.save().encode(w);
    const auto bytes = w.bytes();
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        ByteReader r(std::span(bytes.data(), n));
        auto s = PciHost::State::decode(r);
        CHECK((!s || !r.finish("test")));
    }
    std::vector<std::uint8_t> other(bytes.begin(), bytes.end());
    other[0] = 2;
    ByteReader r(other);
    CHECK_FALSE(PciHost::State::decode(r));
}
