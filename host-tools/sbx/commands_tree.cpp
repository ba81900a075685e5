// scp -r: a directory either way as one tar stream (POSIX ustar, PAX
// headers where ustar cannot hold a field) over GET/PUT
// /v1/sandboxes/{id}/files/tar (docs/api.md, "Files"), packed and unpacked
// here by the agent's own tar code (guest-agent/files: tree_writer,
// tar_reader, tree_extractor), so the guest's archive meets the same
// rules the agent applies to ours: no absolute names, no "..", nothing
// through or below a symlink, no link leading out, no devices, and no
// set-id bits; files belong to whoever runs sbx. Neither side holds more
// than a chunk of the archive. A download into a new directory is
// extracted under a temporary name beside it and renamed when complete.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <optional>

#include "base/unique_fd.hpp"
#include "guest-agent/files/tar_reader.hpp"
#include "guest-agent/files/tree_extractor.hpp"
#include "guest-agent/files/tree_writer.hpp"
#include "host-tools/sbx/files_transfer.hpp"

namespace sbx::cli {

namespace {

// One chunk of the upload: the archive is written in pieces of this size.
constexpr std::size_t kChunk = std::size_t{256} << 10;

std::string tar_target(const CopyEnd& remote, const std::string& path) {
    return target({"v1", "sandboxes", remote.sandbox, "files", "tar"}, {{"path", path}});
}

// A tree: `bytes` of archive, `entries` archived and extracted, `skipped`
// (devices, fifos, sockets: on either side, never copied).
void print_tree_copied(const Context& ctx, const std::string& from, const std::string& to,
                       std::uint64_t bytes, std::uint64_t entries, std::uint64_t skipped) {
    if (ctx.out.json()) {
        ctx.out.event({{"type", "copied"},
                       {"from", from},
                       {"to", to},
                       {"bytes", bytes},
                       {"entries", entries},
                       {"skipped", skipped}});
    } else {
        ctx.out.note(fmt::format("{} -> {}: {} entries, {} bytes of tar{}", from, to, entries, bytes,
                                 skipped > 0 ? fmt::format(", {} special files skipped", skipped) : ""));
    }
}

// The reply sbxd gave on a stream we are done sending, as a failure or
// its JSON body.
Outcome reply_of(const Context& ctx, Result<HttpStream> stream) {
    if (!stream) {
        return explained(ctx, failure_of(stream.error()));
    }
    auto reply = stream->to_reply(1 << 20);
    if (!reply) {
        return failure_of(reply.error());
    }
    if (reply->status < 200 || reply->status >= 300) {
        return explained(ctx, failure_of(*reply));
    }
    Json body = Json::parse(reply->body, nullptr, false);
    if (!body.is_object()) {
        return failure_of(
            make_coded_error("bad_response", "sbxd's answer to a tar upload is not a JSON object"));
    }
    return body;
}

// The directory a download is extracted into: `dest` itself when it
// exists (merged, as scp(1) does), else a temporary one beside it that
// commit() renames to `dest`; removed, with what it holds, if never
// committed.
class TreeTarget {
public:
    static Result<TreeTarget> open(const std::string& dest) {
        TreeTarget t;
        t.dest_ = dest;
        struct stat st {};
        if (::stat(dest.c_str(), &st) == 0) {
            if (!S_ISDIR(st.st_mode)) {
                return make_error("{} exists and is not a directory", dest);
            }
        } else if (errno == ENOENT) {
            t.temp_ = dest + ".sbx-partial-XXXXXX";
            if (::mkdtemp(t.temp_.data()) == nullptr) {
                Error error = sys_error("creating a directory beside {}", dest);
                t.temp_.clear();
                return error;
            }
        } else {
            return sys_error("{}", dest);
        }
        auto fd = UniqueFd::open(t.temp_.empty() ? dest : t.temp_, O_RDONLY | O_DIRECTORY);
        if (!fd) {
            return fd.error();
        }
        t.fd_ = std::move(*fd);
        return t;
    }
    TreeTarget(TreeTarget&& other) noexcept
        : dest_(std::move(other.dest_)), temp_(std::exchange(other.temp_, {})), fd_(std::move(other.fd_)) {}
    TreeTarget& operator=(TreeTarget&&) = delete;
    TreeTarget(const TreeTarget&) = delete;
    TreeTarget& operator=(const TreeTarget&) = delete;
    ~TreeTarget() {
        if (!temp_.empty()) {
            std::error_code ignored;
            std::filesystem::remove_all(temp_, ignored);  // removes links, never follows them
        }
    }

    [[nodiscard]] int fd() const { return fd_.get(); }
    [[nodiscard]] Result<void> commit() {
        if (temp_.empty()) {
            return ok();
        }
        // mkdtemp made it 0700; a new directory gets what mkdir(1) would give.
        const mode_t mask = ::umask(0);
        ::umask(mask);
        if (::fchmod(fd_.get(), 0777 & ~mask) != 0 || ::rename(temp_.c_str(), dest_.c_str()) != 0) {
            return sys_error("saving {}", dest_);
        }
        temp_.clear();
        return ok();
    }

private:
    TreeTarget() = default;
    std::string dest_;
    std::string temp_;  // "": extracting into dest_ itself, or committed
    UniqueFd fd_;
};

}  // namespace

bool remote_is_dir(const Context& ctx, const CopyEnd& remote) {
    Outcome stat =
        call(ctx, get(target({"v1", "sandboxes", remote.sandbox, "files", "stat"}, {{"path", remote.path}})));
    const std::string type = stat.ok() ? stat.body().value("stat", Json::object()).value("type", "") : "";
    if (type != "symlink") {
        return type == "dir";
    }
    // stat does not follow a symlink; list does, and answers only for a directory.
    return call(ctx,
                get(target({"v1", "sandboxes", remote.sandbox, "files", "list"}, {{"path", remote.path}})))
        .ok();
}

int upload_tree(const Context& ctx, const std::string& local, const CopyEnd& remote) {
    auto root = agent::files::open_tree_root(local);
    if (!root) {
        return ctx.out.fail(local_failure(root.error()));
    }
    const bool into = remote.path.ends_with('/') || remote_is_dir(ctx, remote);
    const std::string path = tree_destination(local, remote.path, into);
    auto upload = ctx.client.upload_chunked(
        HttpRequest{"PUT", tar_target(remote, path), {}, {{"Content-Type", "application/x-tar"}}});
    if (!upload) {
        return ctx.out.fail(explained(ctx, failure_of(upload.error())));
    }
    Progress progress(!ctx.out.json(), 0);
    std::optional<Error> sent_error;  // the connection broke: sbxd may have said why
    std::uint64_t sent = 0;
    agent::tar::TarWriter writer(
        [&](std::span<const std::uint8_t> bytes) -> Result<void> {
            auto r = upload->write(std::span(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
            if (!r) {
                sent_error = r.error();
                return r;
            }
            sent += bytes.size();
            progress.update(sent);
            return ok();
        },
        kChunk);
    auto stats = agent::files::write_tree(writer, *root);
    Result<void> packed = stats ? writer.finish() : Result<void>(stats.error());
    if (!packed && !sent_error) {
        // Ours: the upload is dropped without its last chunk, so sbxd
        // stops; what was extracted before stays.
        return ctx.out.fail(local_failure(packed.error().context("packing " + local)));
    }
    Outcome reply = reply_of(ctx, sent_error ? upload->reply() : upload->finish());
    if (!reply.ok()) {
        // No answer after a broken connection: the break itself.
        if (sent_error && reply.failure().status == 0) {
            return ctx.out.fail(failure_of(*sent_error));
        }
        return ctx.out.fail(reply.failure());
    }
    print_tree_copied(ctx, local, remote.sandbox + ":" + path, reply.body().value("bytes", writer.bytes()),
                      reply.body().value("entries", std::uint64_t{0}),
                      stats->skipped + reply.body().value("skipped", std::uint64_t{0}));
    return kExitOk;
}

int download_tree(const Context& ctx, const CopyEnd& remote, const std::string& local) {
    struct stat st {};
    const bool into = ::stat(local.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    const std::string dest = tree_destination(remote.path, local, into);
    auto stream = ctx.client.open(get(tar_target(remote, remote.path)));
    if (!stream) {
        return ctx.out.fail(explained(ctx, failure_of(stream.error())));
    }
    if (stream->status() != 200) {
        auto reply = stream->to_reply(1 << 20);
        return ctx.out.fail(reply ? explained(ctx, failure_of(*reply)) : failure_of(reply.error()));
    }
    auto tree = TreeTarget::open(dest);
    if (!tree) {
        return ctx.out.fail(local_failure(tree.error()));
    }
    // The guest is untrusted: its owners and set-id bits are not kept.
    agent::files::TreeExtractor extractor(tree->fd(),
                                          agent::files::ExtractOptions{std::nullopt, std::nullopt, 01777});
    agent::tar::TarReader reader(extractor);
    std::uint64_t received = 0;
    {
        Progress progress(!ctx.out.json(), 0);
        std::array<char, kChunk> chunk{};
        for (;;) {
            auto got = stream->read(chunk);
            if (!got) {
                return ctx.out.fail(failure_of(got.error()));
            }
            if (*got == 0) {
                break;
            }
            auto fed = reader.feed(std::span(reinterpret_cast<const std::uint8_t*>(chunk.data()), *got));
            if (!fed) {
                return ctx.out.fail(local_failure(fed.error().context("extracting into " + dest)));
            }
            received += *got;
            progress.update(received);
        }
    }
    // In order: the archive must have ended whole before its directories
    // get their modes, and both before the tree takes its name.
    auto done = reader.finish();
    if (done) {
        done = extractor.finish();
    }
    if (done) {
        done = tree->commit();
    }
    if (!done) {
        return ctx.out.fail(local_failure(done.error().context("extracting into " + dest)));
    }
    print_tree_copied(ctx, remote.sandbox + ":" + remote.path, dest, received, extractor.extracted(),
                      extractor.skipped());
    return kExitOk;
}

}  // namespace sbx::cli
