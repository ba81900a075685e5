#include "guest-agent/files/files_client.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <utility>

#include "guest-agent/files/client_transfer.hpp"

namespace sbx::agent::files {
namespace {

using detail::add_owner;
using detail::cap_error;

// A guest lists at most this many entries (docs/agent-protocol.md, "list").
constexpr std::size_t kMaxListEntries = 100'000;

template <typename T>
const Error* error_of(const Result<T>& r) {
    return r ? nullptr : &r.error();
}

// "file", "dir", "symlink" or "other" (docs/agent-protocol.md, "stat").
Result<std::string> reply_kind(const Json& reply) {
    auto kind = reply_string(reply, "kind");
    if (kind && *kind != "file" && *kind != "dir" && *kind != "symlink" && *kind != "other") {
        return malformed_reply("\"kind\" is not file, dir, symlink or other");
    }
    return kind;
}

// A list entry: its name is one path component, so a caller may join it
// to the directory's path.
Result<DirEntry> parse_entry(const Json& e) {
    if (!e.is_object()) {
        return malformed_reply("an entry that is not an object");
    }
    auto name = reply_string(e, "name");
    auto kind = reply_kind(e);
    auto size = reply_u64(e, "size");
    auto mode = reply_u64(e, "mode", 07777);
    auto mtime = reply_i64(e, "mtime");
    for (const Error* err : {error_of(name), error_of(kind), error_of(size), error_of(mode), error_of(mtime)}) {
        if (err != nullptr) {
            return *err;
        }
    }
    if (name->empty() || *name == "." || *name == ".." ||
        name->find_first_of(std::string_view("/\0", 2)) != std::string::npos) {
        return malformed_reply("an entry name that is not one path component");
    }
    return DirEntry{*name, *kind, *size, static_cast<std::uint32_t>(*mode), *mtime};
}

ChunkSource fd_source(int fd, const std::string& path) {
    return [fd, path](std::span<std::uint8_t> buffer) -> Result<std::size_t> {
        std::size_t filled = 0;
        while (filled < buffer.size()) {
            const ssize_t n = ::read(fd, buffer.data() + filled, buffer.size() - filled);
            if (n < 0) {
                if (errno == EINTR) {
                    continue;
                }
                return sys_error("reading {}", path);
            }
            if (n == 0) {
                break;
            }
            filled += static_cast<std::size_t>(n);
        }
        return filled;
    };
}

// The local file of read_file_to: a temporary file beside `path`, renamed
// over it by commit(); removed if never committed. A `path` that exists
// and is not a regular file is written directly.
class LocalDownload {
public:
    static Result<LocalDownload> create(const std::string& path) {
        struct stat st {};
        if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
            auto fd = UniqueFd::open(path, O_WRONLY | O_TRUNC);
            if (!fd) {
                return fd.error();
            }
            return LocalDownload(std::move(*fd), path, std::string());
        }
        const std::filesystem::path p(path);
        std::string temp = (p.parent_path() / ("." + p.filename().string() + ".sbx-XXXXXX")).string();
        const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
        if (fd < 0) {
            return sys_error("creating a temporary file for {}", path);
        }
        LocalDownload out(UniqueFd(fd), path, std::move(temp));
        if (::fchmod(fd, 0644) != 0) {
            return sys_error("chmod {}", out.temp_);
        }
        return out;
    }
    LocalDownload(LocalDownload&& other) noexcept
        : fd_(std::move(other.fd_)), path_(std::move(other.path_)), temp_(std::exchange(other.temp_, {})) {}
    LocalDownload& operator=(LocalDownload&&) = delete;
    ~LocalDownload() {
        if (!temp_.empty()) {
            ::unlink(temp_.c_str());
        }
    }

    [[nodiscard]] int fd() const { return fd_.get(); }
    [[nodiscard]] Result<void> commit() {
        if (temp_.empty()) {
            return ok();
        }
        if (::rename(temp_.c_str(), path_.c_str()) != 0) {
            return sys_error("renaming {} to {}", temp_, path_);
        }
        temp_.clear();
        return ok();
    }

private:
    LocalDownload(UniqueFd fd, std::string path, std::string temp)
        : fd_(std::move(fd)), path_(std::move(path)), temp_(std::move(temp)) {}
    UniqueFd fd_;
    std::string path_;
    std::string temp_;  // "": written in place, or committed
};

}  // namespace

Result<std::uint64_t> read_file(AgentClient& client, std::string_view guest_path, const ChunkSink& sink,
                                ReadRange range, std::uint64_t max_bytes) {
    Json request{{"path", guest_path}, {"offset", range.offset}};
    if (range.length) {
        request["length"] = *range.length;
    }
    auto started = client.expect(client.call("file_read", std::move(request)), "started");
    if (!started) {
        return started.error();
    }
    auto size = reply_u64(*started, "size");
    auto mode = reply_optional_u64(*started, "mode", 07777);
    if (!size || !mode) {
        return client.abandon((!size ? size.error() : mode.error()).context("file_read"));
    }
    // A file announced over the cap is refused before it is sent (a /proc
    // file announces 0; the frames are counted too).
    const std::uint64_t available = *size > range.offset ? *size - range.offset : 0;
    if (std::min(available, range.length.value_or(UINT64_MAX)) > max_bytes) {
        return client.abandon(cap_error(guest_path, max_bytes));
    }
    std::uint64_t received = 0;
    auto result = detail::receive_download(client, guest_path, sink, range.length, max_bytes, received);
    if (!result) {
        return result.error();
    }
    auto bytes = reply_u64(*result, "bytes");
    if (!bytes || *bytes != received) {
        return make_error("file_read of {}: the agent counted {} bytes, {} arrived", printable(guest_path, 1024),
                          bytes ? *bytes : 0, received);
    }
    return received;
}

Result<std::uint64_t> read_file_to(AgentClient& client, std::string_view guest_path,
                                   const std::string& local_path, ReadRange range, std::uint64_t max_bytes) {
    auto out = LocalDownload::create(local_path);
    if (!out) {
        return out.error();
    }
    auto received = read_file(
        client, guest_path,
        [&](std::span<const std::uint8_t> bytes) -> Result<void> {
            if (auto r = write_all(out->fd(), bytes.data(), bytes.size()); !r) {
                return r.error().context(local_path);
            }
            return ok();
        },
        range, max_bytes);
    if (!received) {
        return received;
    }
    if (auto r = out->commit(); !r) {
        return r.error();
    }
    return received;
}

Result<std::string> read_file_text(AgentClient& client, std::string_view guest_path, std::size_t max_bytes) {
    std::string text;
    // Asking for one byte more than allowed tells a file that is too big
    // without transferring (and draining) all of it.
    auto r = read_file(
        client, guest_path,
        [&](std::span<const std::uint8_t> bytes) -> Result<void> {
            if (bytes.size() > max_bytes - text.size()) {
                return make_error("{} is over {} bytes", guest_path, max_bytes);
            }
            text.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
            return ok();
        },
        ReadRange{0, static_cast<std::uint64_t>(max_bytes) + 1});
    if (!r) {
        return r.error();
    }
    return text;
}

Result<std::uint64_t> write_file(AgentClient& client, std::string_view guest_path, const ChunkSource& source,
                                 const WriteOptions& options) {
    Json request{{"path", guest_path}, {"mkdirs", options.mkdirs}, {"append", options.append}};
    if (options.mode) {
        request["mode"] = *options.mode;
    }
    add_owner(request, options.owner);
    auto ready = client.expect(client.call("file_write", std::move(request)), "ready");
    if (!ready) {
        return ready.error();
    }
    auto result = client.expect(detail::upload(client, source), "result");
    if (!result) {
        return result.error();
    }
    return reply_u64(*result, "bytes");
}

Result<std::uint64_t> write_file_from(AgentClient& client, const std::string& local_path,
                                      std::string_view guest_path, WriteOptions options) {
    auto in = UniqueFd::open(local_path, O_RDONLY);
    if (!in) {
        return in.error();
    }
    struct stat st {};
    if (::fstat(in->get(), &st) != 0) {
        return sys_error("stat {}", local_path);
    }
    if (!options.mode) {
        options.mode = st.st_mode & 07777;
    }
    ::posix_fadvise(in->get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    return write_file(client, guest_path, fd_source(in->get(), local_path), options);
}

Result<std::uint64_t> write_file_text(AgentClient& client, std::string_view guest_path,
                                      std::string_view content, const WriteOptions& options) {
    return write_file(
        client, guest_path,
        [&content](std::span<std::uint8_t> buffer) -> Result<std::size_t> {
            const std::size_t n = std::min(buffer.size(), content.size());
            std::copy_n(content.begin(), n, buffer.begin());
            content.remove_prefix(n);
            return n;
        },
        options);
}

Result<FileInfo> stat(AgentClient& client, std::string_view guest_path, bool follow) {
    auto reply = client.expect(client.call("stat", Json{{"path", guest_path}, {"follow", follow}}), "result");
    if (!reply) {
        return reply.error();
    }
    auto kind = reply_kind(*reply);
    auto size = reply_u64(*reply, "size");
    auto mode = reply_u64(*reply, "mode", 07777);
    auto uid = reply_u64(*reply, "uid", UINT32_MAX);
    auto gid = reply_u64(*reply, "gid", UINT32_MAX);
    auto mtime = reply_i64(*reply, "mtime");
    auto target = reply_optional_string(*reply, "target");
    for (const Error* e : {error_of(kind), error_of(size), error_of(mode), error_of(uid), error_of(gid),
                           error_of(mtime), error_of(target)}) {
        if (e != nullptr) {
            return e->context("stat");
        }
    }
    return FileInfo{*kind,
                    *size,
                    static_cast<std::uint32_t>(*mode),
                    static_cast<std::uint32_t>(*uid),
                    static_cast<std::uint32_t>(*gid),
                    *mtime,
                    target->value_or("")};
}

Result<std::vector<DirEntry>> list(AgentClient& client, std::string_view guest_path) {
    if (auto r = client.send_request("list", Json{{"path", guest_path}}); !r) {
        return r.error();
    }
    std::vector<DirEntry> entries;
    while (true) {
        auto reply = client.read_reply();
        if (!reply) {
            return reply.error();
        }
        const std::string type = reply_type(*reply);
        const bool last = type == "result";
        if (!last && type != "entries") {
            return client.abandon(
                malformed_reply(fmt::format("unexpected \"{}\" message in a list", printable(type, 64))));
        }
        auto batch = reply->find("entries");
        // A batch before the last is never empty: no endless stream of them.
        if (batch == reply->end() || !batch->is_array() || (!last && batch->empty()) ||
            entries.size() + batch->size() > kMaxListEntries) {
            return client.abandon(malformed_reply("a list batch that is missing, empty or over the entry limit"));
        }
        for (const Json& e : *batch) {
            auto entry = parse_entry(e);
            if (!entry) {
                return client.abandon(entry.error().context("list"));
            }
            entries.push_back(std::move(*entry));
        }
        if (last) {
            return entries;
        }
    }
}

Result<void> make_dir(AgentClient& client, std::string_view guest_path, const MkdirOptions& options) {
    Json request{{"path", guest_path}, {"mode", options.mode}, {"parents", options.parents}};
    add_owner(request, options.owner);
    auto reply = client.expect(client.call("mkdir", std::move(request)), "result");
    return reply ? ok() : Result<void>(reply.error());
}

Result<void> remove(AgentClient& client, std::string_view guest_path, bool recursive) {
    auto reply =
        client.expect(client.call("remove", Json{{"path", guest_path}, {"recursive", recursive}}), "result");
    return reply ? ok() : Result<void>(reply.error());
}

Result<void> rename(AgentClient& client, std::string_view from, std::string_view to) {
    auto reply = client.expect(client.call("rename", Json{{"from", from}, {"to", to}}), "result");
    return reply ? ok() : Result<void>(reply.error());
}

}  // namespace sbx::agent::files
