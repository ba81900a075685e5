// The tar ops' client (docs/agent-protocol.md, "tar_get", "tar_put"):
// an archive streamed through a sink or a source, or a local tree walked
// into it and extracted from it on this side.
#include <fcntl.h>

#include <filesystem>

#include "guest-agent/files/client_transfer.hpp"
#include "guest-agent/files/tree_extractor.hpp"
#include "guest-agent/files/tree_writer.hpp"

namespace sbx::agent::files {
namespace {

using detail::add_owner;

Result<TarResult> tar_result(const Result<Json>& reply, std::uint64_t bytes) {
    if (!reply) {
        return reply.error();
    }
    auto entries = reply_u64(*reply, "entries");
    auto skipped = reply_optional_u64(*reply, "skipped");
    if (!entries || !skipped) {
        return !entries ? entries.error() : skipped.error();
    }
    return TarResult{bytes, *entries, skipped->value_or(0)};
}

}  // namespace

Result<TarResult> get_tar(AgentClient& client, std::string_view guest_path, const ChunkSink& sink,
                          std::uint64_t max_bytes) {
    auto started = client.expect(client.call("tar_get", Json{{"path", guest_path}}), "started");
    if (!started) {
        return started.error();
    }
    std::uint64_t received = 0;
    auto result = detail::receive_download(client, guest_path, sink, std::nullopt, max_bytes, received);
    if (!result) {
        return result.error();
    }
    auto bytes = reply_u64(*result, "bytes");
    if (!bytes || *bytes != received) {
        return make_error("tar_get of {}: the agent counted {} bytes, {} arrived", printable(guest_path, 1024),
                          bytes ? *bytes : 0, received);
    }
    return tar_result(result, received);
}

Result<TarResult> get_tree(AgentClient& client, std::string_view guest_path, const std::string& local_dir,
                           std::uint64_t max_bytes) {
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
    auto result = get_tar(
        client, guest_path, [&](std::span<const std::uint8_t> bytes) { return reader.feed(bytes); }, max_bytes);
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
    auto ready = client.expect(client.call("tar_put", std::move(request)), "ready");
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
    // Sent first, counted after: an argument list has no order of evaluation.
    auto result = client.expect(detail::upload(client, counted), "result");
    return tar_result(result, bytes);
}

Result<TarResult> put_tree(AgentClient& client, const std::string& local_path, std::string_view guest_dir,
                           const Ownership& owner) {
    auto root = open_tree_root(local_path);
    if (!root) {
        return root.error();
    }
    Json request{{"path", guest_dir}};
    add_owner(request, owner);
    auto ready = client.expect(client.call("tar_put", std::move(request)), "ready");
    if (!ready) {
        return ready.error();
    }
    detail::UploadSender sender(client);
    tar::TarWriter writer([&](std::span<const std::uint8_t> bytes) { return sender.send(bytes); },
                          kMaxDataPayload);
    auto stats = write_tree(writer, *root);
    Result<void> finished = stats ? writer.finish() : Result<void>(stats.error());
    if (!finished) {
        // A local failure cancels the upload; the agent's own error or a
        // broken connection has ended it already.
        return sender.can_cancel() ? sender.cancel(finished.error()) : finished.error();
    }
    auto result = tar_result(client.expect(sender.finish(), "result"), writer.bytes());
    if (result) {
        result->skipped += stats->skipped;
    }
    return result;
}

}  // namespace sbx::agent::files
