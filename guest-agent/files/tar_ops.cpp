// tar_get and tar_put (docs/agent-protocol.md, "Files"): a guest tree as a
// tar stream, built while it is sent (one DATA frame's worth of memory), and
// a tar stream extracted as it arrives, by the same writer, reader and
// extractor the client uses on the host.
#include <fcntl.h>

#include "guest-agent/files/make_dirs.hpp"
#include "guest-agent/files/tree_extractor.hpp"
#include "guest-agent/files/tree_writer.hpp"
#include "guest-agent/files/upload.hpp"

namespace sbx::agent {
namespace {

Result<void> tar_get(Session& session, const Json& request) {
    auto path = files::get_path(request, "path");
    if (!path) {
        return path.error();
    }
    auto root = files::open_tree_root(*path);
    if (!root) {
        return root.error();
    }
    FrameStream& stream = session.stream();
    if (auto r = stream.write_message(Json{{"type", "started"}}); !r) {
        return r;
    }
    std::uint64_t offset = 0;
    tar::TarWriter writer(
        [&](std::span<const std::uint8_t> bytes) -> Result<void> {
            auto r = stream.write_data(Channel::Content, offset, bytes);
            offset += bytes.size();
            return r;
        },
        kMaxDataPayload);
    auto stats = files::write_tree(writer, *root);
    if (!stats) {
        return stats.error();  // the final message; the client drops the partial archive
    }
    if (auto r = writer.finish(); !r) {
        return r;
    }
    if (auto r = stream.write_eof(Channel::Content); !r) {
        return r;
    }
    return stream.write_message(Json{{"type", "result"},
                                     {"bytes", writer.bytes()},
                                     {"entries", stats->entries},
                                     {"skipped", stats->skipped}});
}

Result<void> tar_put(Session& session, const Json& request) {
    auto path = files::get_path(request, "path");
    if (!path) {
        return path.error();
    }
    auto owner = files::get_owner(request, session.agent().options().default_user);
    if (!owner) {
        return owner.error();
    }
    if (auto r = files::make_dirs(*path, 0755, *owner); !r) {
        return r;
    }
    auto root = UniqueFd::open(*path, O_RDONLY | O_DIRECTORY);
    if (!root) {
        return root.error();
    }
    files::TreeExtractor extractor(root->get(), files::ExtractOptions{owner->uid, owner->gid, 07777});
    tar::TarReader reader(extractor);
    // On an error the entries so far stay; the session discards the rest of the DATA.
    auto received =
        files::receive_upload(session, [&](std::span<const std::uint8_t> bytes) { return reader.feed(bytes); });
    if (!received || !*received) {
        return received ? ok() : Result<void>(received.error());
    }
    if (auto r = reader.finish(); !r) {
        return r;
    }
    if (auto r = extractor.finish(); !r) {
        return r;
    }
    return session.stream().write_message(
        Json{{"type", "result"}, {"entries", extractor.extracted()}, {"skipped", extractor.skipped()}});
}

}  // namespace

void register_tar_ops(OpTable& ops) {
    ops.emplace("tar_get", tar_get);
    ops.emplace("tar_put", tar_put);
}

}  // namespace sbx::agent
