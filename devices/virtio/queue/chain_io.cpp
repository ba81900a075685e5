#include "devices/virtio/queue/chain_io.hpp"

#include <cstring>

namespace sbx::virtio {

std::size_t detail::SegmentCursor::take_iovecs(std::size_t len, std::vector<iovec>& out) {
    return visit(len, [&](std::span<std::uint8_t> bytes) { out.push_back(iovec{bytes.data(), bytes.size()}); });
}

std::size_t ChainReader::read(std::span<std::uint8_t> out) {
    std::size_t pos = 0;
    return cursor_.visit(out.size(), [&](std::span<std::uint8_t> bytes) {
        std::memcpy(out.data() + pos, bytes.data(), bytes.size());
        pos += bytes.size();
    });
}

Result<void> ChainReader::read_exact(std::span<std::uint8_t> out) {
    if (remaining() < out.size()) {
        return make_error("chain has {} readable bytes left, {} needed", remaining(), out.size());
    }
    read(out);
    return ok();
}

std::size_t ChainReader::skip(std::size_t len) {
    return cursor_.visit(len, [](std::span<std::uint8_t>) {});
}

std::size_t ChainWriter::write(std::span<const std::uint8_t> in) {
    std::size_t pos = 0;
    std::size_t n = cursor_.visit(in.size(), [&](std::span<std::uint8_t> bytes) {
        std::memcpy(bytes.data(), in.data() + pos, bytes.size());
        pos += bytes.size();
    });
    written_ += static_cast<std::uint32_t>(n);
    return n;
}

Result<void> ChainWriter::write_exact(std::span<const std::uint8_t> in) {
    if (available() < in.size()) {
        return make_error("chain has {} writable bytes left, {} needed", available(), in.size());
    }
    write(in);
    return ok();
}

std::size_t ChainWriter::skip(std::size_t len) {
    std::size_t n = cursor_.visit(len, [](std::span<std::uint8_t>) {});
    written_ += static_cast<std::uint32_t>(n);
    return n;
}

}  // namespace sbx::virtio
