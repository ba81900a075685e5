#include "devices/virtio/queue/descriptor_chain.hpp"

namespace sbx::virtio {
namespace {

Result<RawDescriptor> read_descriptor(const GuestMemory& memory, GuestAddress table, std::uint16_t index) {
    auto desc = memory.read_obj<RawDescriptor>(table + std::uint64_t{index} * sizeof(RawDescriptor));
    if (!desc) {
        return make_error("descriptor {} is outside guest memory", index);
    }
    return desc;
}

}  // namespace

void DescriptorChain::clear() {
    segments_.clear();
    first_writable_ = 0;
    readable_bytes_ = writable_bytes_ = 0;
    descriptors_ = 0;
}

Result<void> DescriptorChain::add(const RawDescriptor& desc, const GuestMemory& memory) {
    if (++descriptors_ > kMaxChainDescriptors) {
        return make_error("chain is longer than {} descriptors", kMaxChainDescriptors);
    }
    const bool writable = (desc.flags & kDescFlagWrite) != 0;
    if (!writable && first_writable_ != segments_.size()) {
        // §2.7.4.2: device-writable elements come after device-readable ones.
        return make_error("device-readable descriptor after a device-writable one");
    }
    if (desc.len == 0) {
        return ok();  // nothing to read or write
    }
    auto bytes = memory.slice(GuestAddress(desc.addr), desc.len);
    if (!bytes) {
        return make_error("buffer {:#x}+{:#x} is outside guest memory", desc.addr, desc.len);
    }
    std::uint64_t& total = writable ? writable_bytes_ : readable_bytes_;
    total += desc.len;
    if (total > UINT32_MAX) {
        return make_error("chain holds more than 4 GiB");  // the used length is 32 bits
    }
    segments_.push_back(Segment{GuestAddress(desc.addr), *bytes});
    if (!writable) {
        first_writable_ = segments_.size();
    }
    return ok();
}

Result<void> DescriptorChain::parse(const DescriptorTable& table, std::uint16_t head) {
    clear();
    head_ = head;
    const GuestMemory& memory = *table.memory;
    auto fail = [this](Error e) -> Result<void> {
        clear();
        return e.context(fmt::format("descriptor chain {}", head_));
    };
    if (head >= table.size) {
        return fail(make_error("head index {} is not below the queue size {}", head, table.size));
    }
    std::uint16_t index = head;
    // A chain in the table visits each entry at most once; more steps than
    // entries means a loop.
    for (std::uint32_t steps = 0;; ++steps) {
        if (steps >= table.size) {
            return fail(make_error("loop in the descriptor table"));
        }
        auto desc = read_descriptor(memory, table.address, index);
        if (!desc) {
            return fail(desc.error());
        }
        if ((desc->flags & kDescFlagIndirect) == 0) {
            if (auto r = add(*desc, memory); !r) {
                return fail(r.error());
            }
        } else {
            // §2.7.5.3.1: only when negotiated, never with NEXT, a whole
            // number of descriptors, and none of them indirect again.
            if (!table.indirect_allowed) {
                return fail(make_error("indirect descriptor without VIRTIO_F_INDIRECT_DESC"));
            }
            if ((desc->flags & kDescFlagNext) != 0) {
                return fail(make_error("indirect descriptor also has NEXT"));
            }
            if (desc->len == 0 || desc->len % sizeof(RawDescriptor) != 0 ||
                desc->len / sizeof(RawDescriptor) > kMaxChainDescriptors) {
                return fail(make_error("indirect table length {:#x} is invalid", desc->len));
            }
            if (!memory.contains(GuestAddress(desc->addr), desc->len)) {
                return fail(make_error("indirect table {:#x}+{:#x} is outside guest memory", desc->addr, desc->len));
            }
            const auto entries = static_cast<std::uint16_t>(desc->len / sizeof(RawDescriptor));
            std::uint16_t inner = 0;
            for (std::uint32_t inner_steps = 0;; ++inner_steps) {
                if (inner_steps >= entries) {
                    return fail(make_error("loop in an indirect table"));
                }
                auto d = read_descriptor(memory, GuestAddress(desc->addr), inner);
                if (!d) {
                    return fail(d.error());
                }
                if ((d->flags & kDescFlagIndirect) != 0) {
                    return fail(make_error("indirect descriptor inside an indirect table"));
                }
                if (auto r = add(*d, memory); !r) {
                    return fail(r.error());
                }
                if ((d->flags & kDescFlagNext) == 0) {
                    break;
                }
                if (d->next >= entries) {
                    return fail(make_error("next index {} is outside the indirect table of {}", d->next, entries));
                }
                inner = d->next;
            }
            return ok();
        }
        if ((desc->flags & kDescFlagNext) == 0) {
            return ok();
        }
        if (desc->next >= table.size) {
            return fail(make_error("next index {} is not below the queue size {}", desc->next, table.size));
        }
        index = desc->next;
    }
}

}  // namespace sbx::virtio
