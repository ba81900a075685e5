// GET /v1/sandboxes/{id}/logs (docs/api.md): the guest's serial
// console as sbx-vmm writes it into the sandbox's folder, read from the
// file in any state (a stopped or crashed sandbox's stays until it is
// deleted), never through the guest: no wake, no activity. A read is a
// byte range [start, size) of the file as it is when the request comes;
// the size goes out in Sandbox-Log-Size and the start in
// Sandbox-Log-Offset, so a client polls on from start + the bytes it got.
// Up to kWholeLogBytes the range is one body with its Content-Length;
// more is streamed from the file (chunked, RFC 9112 §7.1), never whole in
// memory.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <memory>

#include "base/log.hpp"
#include "base/unique_fd.hpp"
#include "host-tools/sbxd/api/fields.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"

namespace sbx::sbxd {

using http::Request;
using http::Response;

namespace {

constexpr std::uint64_t kWholeLogBytes = 1 << 20;
constexpr std::size_t kLogChunk = std::size_t{256} << 10;

// A byte count as a query value: decimal digits only (no sign, no spaces).
Result<std::uint64_t> parse_bytes(std::string_view text, std::string_view name) {
    std::uint64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || text.front() == '+' || ec != std::errc() || end != text.data() + text.size()) {
        return api::invalid_argument(fmt::format("{} must be a number of bytes (0 or more)", name));
    }
    return value;
}

// pread(2) until `out` is full or the end of the file; short when the file
// is shorter (truncated by a new VMM meanwhile).
Result<std::size_t> read_at(int fd, std::span<char> out, std::uint64_t offset) {
    std::size_t done = 0;
    while (done < out.size()) {
        ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return sys_error("reading the console log");
        }
        if (n == 0) {
            break;
        }
        done += static_cast<std::size_t>(n);
    }
    return done;
}

}  // namespace

Response ApiService::sandbox_logs(const Request& request, const PathParams& params) const {
    std::optional<std::uint64_t> offset;
    std::optional<std::uint64_t> tail;
    for (const auto& [key, value] : request.query) {
        if (key != "offset" && key != "tail") {
            return Response::error(
                api::invalid_argument(fmt::format("unknown query parameter '{}' (offset, tail)", key)),
                request.request_id);
        }
        auto& slot = key == "offset" ? offset : tail;
        if (slot) {
            return Response::error(
                api::invalid_argument(fmt::format("query parameter '{}' given twice", key)),
                request.request_id);
        }
        auto bytes = parse_bytes(value, key);
        if (!bytes) {
            return Response::error(bytes.error(), request.request_id);
        }
        slot = *bytes;
    }
    if (offset && tail) {
        return Response::error(api::invalid_argument("offset and tail exclude each other"),
                               request.request_id);
    }
    auto sandbox = store_.get_sandbox(params.at("id"));
    if (!sandbox) {
        return Response::error(sandbox.error(), request.request_id);
    }
    auto path = driver_.console_log(sandbox->id);
    if (!path) {
        return Response::error(path.error(), request.request_id);
    }
    // No file yet (a create before its VMM started) is an empty log.
    auto fd = std::make_shared<UniqueFd>(::open(path->c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY));
    std::uint64_t size = 0;
    if (fd->valid()) {
        struct stat st {};
        if (::fstat(fd->get(), &st) != 0) {
            return Response::error(sys_error("stat {}", *path).with_code(api::code::kInternal),
                                   request.request_id);
        }
        if (!S_ISREG(st.st_mode)) {
            return Response::error(
                make_coded_error(api::code::kInternal, "the console log of {} is not a regular file",
                                 sandbox->id),
                request.request_id);
        }
        size = static_cast<std::uint64_t>(st.st_size);
    } else if (errno != ENOENT) {
        return Response::error(sys_error("opening {}", *path).with_code(api::code::kInternal),
                               request.request_id);
    }
    // An offset past the end (the log of an earlier VMM, since truncated)
    // is an empty read whose size says so.
    const std::uint64_t start = tail ? size - std::min(*tail, size) : std::min(offset.value_or(0), size);
    Response response;
    response.headers = {{"Content-Type", "text/plain"},
                        {"Sandbox-Log-Size", std::to_string(size)},
                        {"Sandbox-Log-Offset", std::to_string(start)},
                        {"Cache-Control", "no-store"}};
    const std::uint64_t length = size - start;
    if (length <= kWholeLogBytes) {
        response.body.resize(static_cast<std::size_t>(length));
        if (length > 0) {
            auto got = read_at(fd->get(), response.body, start);
            if (!got) {
                return Response::error(got.error().with_code(api::code::kInternal), request.request_id);
            }
            response.body.resize(*got);
        }
        return response;
    }
    response.stream = [fd, start, end = size](http::BodyWriter& out) {
        std::string chunk(kLogChunk, '\0');
        for (std::uint64_t at = start; at < end;) {
            auto want = static_cast<std::size_t>(std::min<std::uint64_t>(kLogChunk, end - at));
            auto got = read_at(fd->get(), std::span(chunk.data(), want), at);
            if (!got) {
                log::warn("{}", got.error().to_string());
                out.cancel();  // no last chunk: the client sees a cut body
                return;
            }
            if (*got == 0 || !out.write(std::string_view(chunk.data(), *got))) {
                return;  // truncated meanwhile: the log ends here; or the client left
            }
            at += *got;
        }
    };
    return response;
}

}  // namespace sbx::sbxd
