// A sandbox's tap: a persistent tap interface (the kernel's
// Documentation/networking/tuntap.rst) that sbxd creates and sbx-vmm
// attaches to later (`--net tap=NAME`). It is a single-queue tap made with
// the flags sbx-vmm opens it with (IFF_TAP | IFF_NO_PI | IFF_VNET_HDR,
// devices/virtio/net/tap.cpp; the kernel refuses an attach whose
// IFF_MULTI_QUEUE differs), then TUNSETPERSIST, so it outlives the fd that
// made it, the VMM and sbxd. A PersistentTap owns the interface: it is
// deleted when the owner goes, unless released for the next sbxd to adopt.
#pragma once

#include <string>
#include <string_view>

#include "base/result.hpp"

namespace sbx::sbxd::net {

class PersistentTap {
public:
    // Creates tap `name`. A tap of that name left behind (by a crash, or a
    // sandbox whose VMM is gone) is reused; one attached to a process (a
    // VMM still running) is refused with code "tap_busy", and an interface
    // of that name that is not a single-queue tap with code "not_a_tap".
    static Result<PersistentTap> create(std::string_view name);
    // Takes ownership of an existing tap (after a restart of sbxd), which
    // may be attached to a running VMM. Code "no_such_interface" when it is
    // not there, "not_a_tap" when it is something else (a multi-queue tap
    // is not told apart here: sbx-vmm's attach refuses it).
    static Result<PersistentTap> adopt(std::string_view name);

    PersistentTap(PersistentTap&& other) noexcept;
    PersistentTap& operator=(PersistentTap&& other) noexcept;
    PersistentTap(const PersistentTap&) = delete;
    PersistentTap& operator=(const PersistentTap&) = delete;
    ~PersistentTap();

    [[nodiscard]] const std::string& name() const { return name_; }
    // Deletes the interface now (a VMM attached to it sees its fd go dead).
    Result<void> remove();
    // Gives the interface up: it stays, and this owner forgets it.
    std::string release();

private:
    explicit PersistentTap(std::string name) : name_(std::move(name)) {}
    std::string name_;  // empty: owns nothing
};

// Whether interface `name` is a tap: rtnetlink's link kind "tun" with an
// Ethernet link type (a tun device has none). Code "no_such_interface".
Result<bool> is_tap(std::string_view name);

}  // namespace sbx::sbxd::net
