#include "guest-agent/files/files_client.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "guest-agent/files/tree_extractor.hpp"
#include "guest-agent/files/tree_writer.hpp"

namespace sbx::agent::files {
namespace {

// A guest lists at most this many entries (docs/agent-protocol.md, "list").
constexpr std::size_t kMaxListEntries = 100'000;

void add_owner(Json& request, const Ownership& owner) {
    if (!owner.user.empty()) {
        request["user"] = owner.user;
    }
    if (owner.uid) {
        request["uid"] = *owner.uid;
    }
    if (owner.gid) {
        request["gid"] = *owner.gid;
    }
}

// A reply of the expected type; anything else from the guest is an error.
Result<Json> expect(Result<Json> reply, std::string_view type) {
    if (!reply) {
        return reply;
    }
    if ((*reply)["type"] != type) {
        return make_error("expected a \"{}\" message, got \"{}\"", type, reply->value("type", ""));
    }
    return reply;
}

Result<std::uint64_t> get_count(const Json& message, std::string_view key) {
    auto value = get_int(message, key);
    if (!value) {
        return value.error();
    }
    if (*value < 0) {
        return make_error("negative \"{}\" from the agent", key);
    }
    return static_cast<std::uint64_t>(*value);
}

// Receives a download: DATA on channel 3 with contiguous offsets, EOF, then
// the final result. A sink error stops delivery but not the draining, so
// the connection stays in step; the first error wins.
Result<Json> receive_download(AgentClient& client, const ChunkSink& sink, std::optional<std::uint64_t> limit,
                              std::uint64_t& received) {
    std::optional<Error> failure;
    bool eof = false;
    while (true) {
        auto frame = client.stream().read();
        if (!frame) {
            return frame.error();
        }
        if (frame->kind == FrameKind::Json) {
            auto message = parse_message(frame->json);
            if (!message) {
                return message.error();
            }
            if ((*message)["type"] == "error") {
                return make_error("{}: {}", message->value("code", ""), message->value("message", ""));
            }
            if (failure) {
                return *failure;
            }
            if ((*message)["type"] != "result" || !eof) {
                return make_error("unexpected \"{}\" message in a download", message->value("type", ""));
            }
            return message;
        }
        if (failure) {
            continue;
        }
        if (frame->channel != Channel::Content || eof) {
            failure = make_error("download: a frame on channel {} {}", static_cast<int>(frame->channel),
                                 eof ? "after EOF" : "instead of 3");
        } else if (frame->kind == FrameKind::Eof) {
            eof = true;
        } else if (frame->offset != received) {
            failure = make_error("download: DATA at offset {}, expected {}", frame->offset, received);
        } else if (limit && frame->data.size() > *limit - received) {
            failure = make_error("download: more than the {} bytes asked for", *limit);
        } else {
            received += frame->data.size();
            if (auto r = sink(frame->data); !r) {
                failure = r.error();
            }
        }
    }
}

// The client's side of an upload: DATA on channel 3, checking between
// frames whether the agent already gave up (its error is then the op's
// final reply, and sending more would be wasted).
class UploadSender {
public:
    explicit UploadSender(AgentClient& client) : client_(client) {}

    [[nodiscard]] Result<void> send(std::span<const std::uint8_t> bytes) {
        if (auto r = client_.stream().write_data(Channel::Content, offset_, bytes); !r) {
            done_ = true;  // the connection is broken
            return r;
        }
        offset_ += bytes.size();
        return check_early_reply();
    }
    // EOF, then the agent's final reply.
    [[nodiscard]] Result<Json> finish() {
        if (auto r = client_.stream().write_eof(Channel::Content); !r) {
            return r.error();
        }
        return client_.read_reply();
    }
    // Abandons the upload for a local `reason`: the agent undoes it and
    // answers with an error, read here so the connection stays in step.
    [[nodiscard]] Error cancel(Error reason) {
        if (client_.stream().write_message(Json{{"type", "cancel"}})) {
            [[maybe_unused]] auto reply = client_.read_reply();
        }
        return reason;
    }
    // False once the op is over without us: the agent's error reply was
    // read during the upload, or the connection broke.
    [[nodiscard]] bool can_cancel() const { return !done_; }

private:
    [[nodiscard]] Result<void> check_early_reply() {
        pollfd p{client_.stream().fd(), POLLIN, 0};
        if (!client_.stream().has_buffered_input() && ::poll(&p, 1, 0) <= 0) {
            return ok();
        }
        done_ = true;
        auto reply = client_.read_reply();
        if (!reply) {
            return reply.error();
        }
        return make_error("unexpected \"{}\" message during an upload", reply->value("type", ""));
    }

    AgentClient& client_;
    std::uint64_t offset_ = 0;
    bool done_ = false;
};

// Streams `source` through an upload that the agent has answered "ready" to.
Result<Json> upload(AgentClient& client, const ChunkSource& source) {
    UploadSender sender(client);
    std::vector<std::uint8_t> buffer(kMaxDataPayload);
    while (true) {
        auto n = source(buffer);
        if (!n) {
            return sender.cancel(n.error());
        }
        if (*n == 0) {
            break;
        }
        if (*n > buffer.size()) {
            return sender.cancel(
                make_error("the source claims {} bytes in a {}-byte buffer", *n, buffer.size()));
        }
        if (auto r = sender.send(std::span(buffer).first(*n)); !r) {
            return r.error();
        }
    }
    return sender.finish();
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

Result<TarResult> tar_result(const Result<Json>& reply, std::uint64_t bytes) {
    if (!reply) {
        return reply.error();
    }
    auto entries = get_count(*reply, "entries");
    auto skipped = get_count(*reply, "skipped");
    if (!entries) {
        return entries.error();
    }
    return TarResult{bytes, *entries, skipped ? *skipped : 0};
}

}  // namespace

Result<std::uint64_t> read_file(AgentClient& client, std::string_view guest_path, const ChunkSink& sink,
                                ReadRange range) {
    Json request{{"path", guest_path}, {"offset", range.offset}};
    if (range.length) {
        request["length"] = *range.length;
    }
    auto started = expect(client.call("file_read", std::move(request)), "started");
    if (!started) {
        return started.error();
    }
    std::uint64_t received = 0;
    auto result = receive_download(client, sink, range.length, received);
    if (!result) {
        return result.error();
    }
    auto bytes = get_count(*result, "bytes");
    if (!bytes || *bytes != received) {
        return make_error("file_read of {}: the agent counted {} bytes, {} arrived", guest_path,
                          bytes ? *bytes : 0, received);
    }
    return received;
}

Result<std::uint64_t> read_file_to(AgentClient& client, std::string_view guest_path,
                                   const std::string& local_path, ReadRange range) {
    auto out = UniqueFd::open(local_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!out) {
        return out.error();
    }
    return read_file(
        client, guest_path,
        [&](std::span<const std::uint8_t> bytes) -> Result<void> {
            if (auto r = write_all(out->get(), bytes.data(), bytes.size()); !r) {
                return r.error().context(local_path);
            }
            return ok();
        },
        range);
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
    auto ready = expect(client.call("file_write", std::move(request)), "ready");
    if (!ready) {
        return ready.error();
    }
    auto result = expect(upload(client, source), "result");
    if (!result) {
        return result.error();
    }
    return get_count(*result, "bytes");
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
    auto reply = expect(client.call("stat", Json{{"path", guest_path}, {"follow", follow}}), "result");
    if (!reply) {
        return reply.error();
    }
    auto kind = get_string(*reply, "kind");
    auto size = get_count(*reply, "size");
    auto mode = get_count(*reply, "mode");
    auto uid = get_count(*reply, "uid");
    auto gid = get_count(*reply, "gid");
    auto mtime = get_int(*reply, "mtime");
    auto target = get_string(*reply, "target", std::string());
    if (!kind || !size || !mode || !uid || !gid || !mtime || !target) {
        return make_error("malformed stat reply from the agent");
    }
    return FileInfo{*kind,
                    *size,
                    static_cast<std::uint32_t>(*mode),
                    static_cast<std::uint32_t>(*uid),
                    static_cast<std::uint32_t>(*gid),
                    *mtime,
                    *target};
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
        const bool last = (*reply)["type"] == "result";
        if (!last && (*reply)["type"] != "entries") {
            return make_error("unexpected \"{}\" message in a list", reply->value("type", ""));
        }
        auto batch = reply->find("entries");
        if (batch == reply->end() || !batch->is_array() || entries.size() + batch->size() > kMaxListEntries) {
            return make_error("malformed or oversized list reply from the agent");
        }
        for (const Json& e : *batch) {
            if (!e.is_object()) {
                return make_error("malformed list entry from the agent");
            }
            auto name = get_string(e, "name");
            auto kind = get_string(e, "kind");
            auto size = get_count(e, "size");
            auto mode = get_count(e, "mode");
            auto mtime = get_int(e, "mtime");
            if (!name || !kind || !size || !mode || !mtime) {
                return make_error("malformed list entry from the agent");
            }
            entries.push_back(DirEntry{*name, *kind, *size, static_cast<std::uint32_t>(*mode), *mtime});
        }
        if (last) {
            return entries;
        }
    }
}

Result<void> make_dir(AgentClient& client, std::string_view guest_path, const MkdirOptions& options) {
    Json request{{"path", guest_path}, {"mode", options.mode}, {"parents", options.parents}};
    add_owner(request, options.owner);
    auto reply = expect(client.call("mkdir", std::move(request)), "result");
    return reply ? ok() : Result<void>(reply.error());
}

Result<void> remove(AgentClient& client, std::string_view guest_path, bool recursive) {
    auto reply =
        expect(client.call("remove", Json{{"path", guest_path}, {"recursive", recursive}}), "result");
    return reply ? ok() : Result<void>(reply.error());
}

Result<void> rename(AgentClient& client, std::string_view from, std::string_view to) {
    auto reply = expect(client.call("rename", Json{{"from", from}, {"to", to}}), "result");
    return reply ? ok() : Result<void>(reply.error());
}

Result<TarResult> get_tar(AgentClient& client, std::string_view guest_path, const ChunkSink& sink) {
    auto started = expect(client.call("tar_get", Json{{"path", guest_path}}), "started");
    if (!started) {
        return started.error();
    }
    std::uint64_t received = 0;
    auto result = receive_download(client, sink, std::nullopt, received);
    auto bytes = result ? get_count(*result, "bytes") : Result<std::uint64_t>(received);
    if (result && (!bytes || *bytes != received)) {
        return make_error("tar_get of {}: the agent counted {} bytes, {} arrived", guest_path,
                          bytes ? *bytes : 0, received);
    }
    return tar_result(result, received);
}

Result<TarResult> get_tree(AgentClient& client, std::string_view guest_path, const std::string& local_dir) {
    std::error_code ec;
    std::filesystem::create_directories(local_dir, ec);
    if (ec) {
        return errno_error(fmt::format("creating {}", local_dir), ec.value());
    }
    auto root = UniqueFd::open(local_dir, O_RDONLY | O_DIRECTORY);
    if (!root) {
        return root.error();
    }
    // The guest is untrusted: its set-id bits and owners are not kept.
    TreeExtractor extractor(root->get(), ExtractOptions{std::nullopt, std::nullopt, 01777});
    tar::TarReader reader(extractor);
    auto result =
        get_tar(client, guest_path, [&](std::span<const std::uint8_t> bytes) { return reader.feed(bytes); });
    if (!result) {
        return result;
    }
    if (auto r = reader.finish(); !r) {
        return r.error();
    }
    if (auto r = extractor.finish(); !r) {
        return r.error();
    }
    result->entries = extractor.extracted();
    result->skipped += extractor.skipped();
    return result;
}

Result<TarResult> put_tar(AgentClient& client, std::string_view guest_dir, const ChunkSource& source,
                          const Ownership& owner) {
    Json request{{"path", guest_dir}};
    add_owner(request, owner);
    auto ready = expect(client.call("tar_put", std::move(request)), "ready");
    if (!ready) {
        return ready.error();
    }
    std::uint64_t bytes = 0;
    auto counted = [&](std::span<std::uint8_t> buffer) -> Result<std::size_t> {
        auto n = source(buffer);
        if (n) {
            bytes += *n;
        }
        return n;
    };
    return tar_result(expect(upload(client, counted), "result"), bytes);
}

Result<TarResult> put_tree(AgentClient& client, const std::string& local_path, std::string_view guest_dir,
                           const Ownership& owner) {
    auto root = open_tree_root(local_path);
    if (!root) {
        return root.error();
    }
    Json request{{"path", guest_dir}};
    add_owner(request, owner);
    auto ready = expect(client.call("tar_put", std::move(request)), "ready");
    if (!ready) {
        return ready.error();
    }
    UploadSender sender(client);
    tar::TarWriter writer([&](std::span<const std::uint8_t> bytes) { return sender.send(bytes); },
                          kMaxDataPayload);
    auto stats = write_tree(writer, *root);
    Result<void> finished = stats ? writer.finish() : Result<void>(stats.error());
    if (!finished) {
        // A local failure cancels the upload; the agent's own error or a
        // broken connection has ended it already.
        return sender.can_cancel() ? sender.cancel(finished.error()) : finished.error();
    }
    auto result = tar_result(expect(sender.finish(), "result"), writer.bytes());
    if (result) {
        result->skipped += stats->skipped;
    }
    return result;
}

}  // namespace sbx::agent::files
