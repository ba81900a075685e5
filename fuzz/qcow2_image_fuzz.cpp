// libFuzzer target: arbitrary bytes as a qcow2 image (in a memfd). The
// header cluster goes through parse_header as it is; then, with its
// backing-file fields cleared (so no host file is opened), the image is
// opened (odd sizes writable), asked for extents, and read, written,
// zeroed, discarded and flushed at offsets the input picks. Nothing may
// crash, hang or allocate from a hostile field; a refused open carries a
// code or an errno.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "base/unique_fd.hpp"
#include "devices/virtio/blk/qcow2/qcow2_image.hpp"

namespace {

using namespace sbx::qcow2;

constexpr std::uint64_t kMaxSpan = 64 * 1024;

std::uint64_t pick(const std::vector<std::uint8_t>& b, std::size_t at, std::uint64_t bound) {
    if (bound == 0 || b.size() < at + 8) {
        return 0;
    }
    return load_be64(&b[b.size() - at - 8]) % bound;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::vector<std::uint8_t> file(data, data + size);
    (void)parse_header(file, file.size());
    if (file.size() >= 20) {
        std::fill(file.begin() + 8, file.begin() + 20, 0);  // backing_file_offset and backing_file_size
    }
    sbx::UniqueFd fd(::memfd_create("qcow2-fuzz", MFD_CLOEXEC));
    if (!fd ||
        (size > 0 && ::pwrite(fd.get(), file.data(), file.size(), 0) != static_cast<ssize_t>(file.size()))) {
        return 0;
    }
    const bool writable = size % 2 == 1;
    auto image = Image::open(std::move(fd), "fuzz.qcow2", writable, BackingFiles::Follow);
    if (!image) {
        if (image.error().code.empty() && image.error().errno_value == 0) {
            __builtin_trap();
        }
        return 0;
    }
    Image& disk = **image;
    const std::uint64_t disk_bytes = disk.size();
    std::vector<std::uint8_t> buffer(kMaxSpan, 0xa5);
    auto span_at = [&](std::size_t at, std::uint64_t& offset) {
        offset = pick(file, at, disk_bytes);
        return std::min<std::uint64_t>(1 + pick(file, at + 8, kMaxSpan), disk_bytes - offset);
    };
    std::uint64_t offset = 0;
    std::uint64_t len = span_at(0, offset);
    (void)disk.read(offset, std::span(buffer).first(len));
    (void)disk.read_extent(offset, len);
    (void)disk.write_extent(offset, len);
    if (writable) {
        len = span_at(16, offset);
        (void)disk.write(offset, std::span(buffer).first(len));
        len = span_at(32, offset);
        (void)disk.write_zeroes(offset, len, (size & 2) != 0);
        len = span_at(48, offset);
        (void)disk.discard(offset, len);
        (void)disk.flush();
        len = span_at(64, offset);
        (void)disk.read(offset, std::span(buffer).first(len));
    }
    return 0;
}
