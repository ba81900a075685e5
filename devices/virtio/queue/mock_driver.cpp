#include "devices/virtio/queue/mock_driver.hpp"

#include <stdexcept>

namespace sbx::virtio::testing {
namespace {

constexpr std::uint64_t kPage = 4096;

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

template <typename T>
void put(const GuestMemory& memory, GuestAddress addr, const T& value) {
    if (!memory.write_obj(addr, value)) {
        throw std::runtime_error("mock driver: write outside guest memory");
    }
}

template <typename T>
T get(const GuestMemory& memory, GuestAddress addr) {
    auto v = memory.read_obj<T>(addr);
    if (!v) {
        throw std::runtime_error("mock driver: read outside guest memory");
    }
    return *v;
}

}  // namespace

MockDriver::MockDriver(const GuestMemory& memory, GuestAddress base, std::uint16_t size)
    : memory_(memory), size_(size) {
    desc_ = base;
    avail_ = GuestAddress(align_up(desc_.value + 16ULL * size, kPage));
    used_ = GuestAddress(align_up(avail_.value + 6 + 2ULL * size, kPage));
    next_buffer_ = base + 64 * 1024;
    if (!memory.fill(base, next_buffer_.value - base.value, 0)) {
        throw std::runtime_error("mock driver: rings outside guest memory");
    }
}

void MockDriver::configure(Queue& queue) const {
    queue.set_size(size_);
    queue.set_desc_table(desc_.value);
    queue.set_avail_ring(avail_.value);
    queue.set_used_ring(used_.value);
    queue.set_ready(true);
}

GuestAddress MockDriver::allocate(std::uint32_t len) {
    GuestAddress addr = next_buffer_;
    next_buffer_ = GuestAddress(align_up(next_buffer_.value + len, 16));
    return addr;
}

OfferedChain MockDriver::offer(std::span<const std::vector<std::uint8_t>> readable,
                               std::span<const std::uint32_t> writable, bool indirect) {
    std::vector<RawDescriptor> descs;
    OfferedChain chain;
    for (const auto& buf : readable) {
        GuestAddress addr = allocate(static_cast<std::uint32_t>(buf.size()));
        if (!memory_.write(addr, buf)) {
            throw std::runtime_error("mock driver: buffer outside guest memory");
        }
        descs.push_back({addr.value, static_cast<std::uint32_t>(buf.size()), 0, 0});
    }
    for (std::uint32_t len : writable) {
        GuestAddress addr = allocate(len);
        chain.writable.emplace_back(addr, len);
        descs.push_back({addr.value, len, kDescFlagWrite, 0});
    }
    if (indirect) {
        GuestAddress table = allocate(static_cast<std::uint32_t>(16 * descs.size()));
        for (std::size_t i = 0; i < descs.size(); ++i) {
            RawDescriptor d = descs[i];
            if (i + 1 < descs.size()) {
                d.flags |= kDescFlagNext;
                d.next = static_cast<std::uint16_t>(i + 1);
            }
            write_descriptor_at(table, static_cast<std::uint16_t>(i), d);
        }
        chain.head = next_desc_;
        next_desc_ = static_cast<std::uint16_t>((next_desc_ + 1) % size_);
        write_descriptor(chain.head, {table.value, static_cast<std::uint32_t>(16 * descs.size()), kDescFlagIndirect, 0});
    } else {
        chain.head = next_desc_;
        for (std::size_t i = 0; i < descs.size(); ++i) {
            std::uint16_t index = next_desc_;
            next_desc_ = static_cast<std::uint16_t>((next_desc_ + 1) % size_);
            RawDescriptor d = descs[i];
            if (i + 1 < descs.size()) {
                d.flags |= kDescFlagNext;
                d.next = next_desc_;
            }
            write_descriptor(index, d);
        }
    }
    publish(chain.head);
    return chain;
}

void MockDriver::write_descriptor(std::uint16_t index, const RawDescriptor& desc) const {
    write_descriptor_at(desc_, index, desc);
}

void MockDriver::write_descriptor_at(GuestAddress table, std::uint16_t index, const RawDescriptor& desc) const {
    put(memory_, table + 16ULL * index, desc);
}

void MockDriver::publish(std::uint16_t head) {
    put(memory_, avail_ + 4 + 2ULL * (avail_idx_ % size_), head);
    ++avail_idx_;
    set_avail_idx(avail_idx_);
}

void MockDriver::set_avail_idx(std::uint16_t idx) const { put(memory_, avail_ + 2, idx); }
void MockDriver::set_avail_flags(std::uint16_t flags) const { put(memory_, avail_, flags); }
void MockDriver::set_used_event(std::uint16_t value) const { put(memory_, avail_ + 4 + 2ULL * size_, value); }
std::uint16_t MockDriver::avail_event() const { return get<std::uint16_t>(memory_, used_ + 4 + 8ULL * size_); }
std::uint16_t MockDriver::used_flags() const { return get<std::uint16_t>(memory_, used_); }

std::optional<UsedElem> MockDriver::take_used() {
    auto idx = get<std::uint16_t>(memory_, used_ + 2);
    if (idx == last_used_) {
        return std::nullopt;
    }
    GuestAddress elem = used_ + 4 + 8ULL * (last_used_ % size_);
    ++last_used_;
    return UsedElem{static_cast<std::uint16_t>(get<std::uint32_t>(memory_, elem)), get<std::uint32_t>(memory_, elem + 4)};
}

std::vector<std::uint8_t> MockDriver::read(GuestAddress addr, std::uint32_t len) const {
    std::vector<std::uint8_t> out(len);
    if (!memory_.read(addr, out)) {
        throw std::runtime_error("mock driver: read outside guest memory");
    }
    return out;
}

}  // namespace sbx::virtio::testing
