// scp: one file either way, streamed in pieces (any size), over
// GET/PUT /v1/sandboxes/{id}/files (docs/api.md, "Files"); directories
// with -r (commands_tree.cpp). A download lands in a temporary file
// beside its destination and is renamed over it only when complete, so a
// broken copy leaves nothing half-written behind.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>

#include "base/unique_fd.hpp"
#include "host-tools/sbx/files_transfer.hpp"

namespace sbx::cli {

namespace {

void print_copied(const Context& ctx, const std::string& from, const std::string& to, std::uint64_t bytes) {
    if (ctx.out.json()) {
        ctx.out.event({{"type", "copied"}, {"from", from}, {"to", to}, {"bytes", bytes}});
    } else {
        ctx.out.note(fmt::format("{} -> {}: {} bytes", from, to, bytes));
    }
}

std::string files_target(const std::string& id, const std::string& path,
                         std::vector<std::pair<std::string, std::string>> query = {}) {
    query.insert(query.begin(), {"path", path});
    return target({"v1", "sandboxes", id, "files"}, query);
}

int upload(const Context& ctx, const std::string& local, const CopyEnd& remote) {
    UniqueFd fd(::open(local.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
        return ctx.out.fail(local_failure(sys_error("opening {}", local)));
    }
    if (!S_ISREG(st.st_mode)) {
        return ctx.out.fail(local_failure(make_error(
            "{} is not a regular file{}", local, S_ISDIR(st.st_mode) ? " (a directory needs scp -r)" : "")));
    }
    // Into a directory: keep the file's name, as scp(1) does.
    std::string path = remote.path;
    if (!path.ends_with('/')) {
        Outcome stat =
            call(ctx, get(target({"v1", "sandboxes", remote.sandbox, "files", "stat"}, {{"path", path}})));
        bool is_dir = stat.ok() && stat.body().value("stat", Json::object()).value("type", "") == "dir";
        path = copy_destination(local, path, is_dir);
    } else {
        path = copy_destination(local, path, true);
    }
    HttpRequest request{
        "PUT",
        files_target(remote.sandbox, path, {{"mode", fmt::format("{:04o}", st.st_mode & 07777)}}),
        {},
        {{"Content-Type", "application/octet-stream"}}};
    auto size = static_cast<std::uint64_t>(st.st_size);
    Progress progress(!ctx.out.json(), size);
    auto stream =
        ctx.client.upload(request, fd.get(), size, [&](std::uint64_t sent) { progress.update(sent); });
    if (!stream) {
        return ctx.out.fail(explained(ctx, stream.error().code == "local" ? local_failure(stream.error())
                                                                          : failure_of(stream.error())));
    }
    auto reply = stream->to_reply(1 << 20);
    if (!reply) {
        return ctx.out.fail(failure_of(reply.error()));
    }
    if (reply->status < 200 || reply->status >= 300) {
        return ctx.out.fail(explained(ctx, failure_of(*reply)));
    }
    print_copied(ctx, local, remote.sandbox + ":" + path, size);
    return kExitOk;
}

Result<void> write_all(int fd, const char* data, std::size_t size) {
    while (size > 0) {
        ssize_t n = ::write(fd, data, size);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return sys_error("writing");
        }
        data += n;
        size -= static_cast<std::size_t>(n);
    }
    return ok();
}

int download(const Context& ctx, const CopyEnd& remote, const std::string& local) {
    bool to_stdout = local == "-";
    struct stat st {};
    bool local_is_dir = !to_stdout && ::stat(local.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    std::string destination = to_stdout ? local : copy_destination(remote.path, local, local_is_dir);

    auto stream = ctx.client.open(get(files_target(remote.sandbox, remote.path)));
    if (!stream) {
        return ctx.out.fail(explained(ctx, failure_of(stream.error())));
    }
    if (stream->status() != 200) {
        auto reply = stream->to_reply(1 << 20);
        if (!reply) {
            return ctx.out.fail(failure_of(reply.error()));
        }
        Failure failure = explained(ctx, failure_of(*reply));
        if (failure.code == "invalid_argument" && failure.message.find("directory") != std::string::npos) {
            failure.message += " (a directory needs scp -r)";
        }
        return ctx.out.fail(failure);
    }
    UniqueFd fd;
    std::string partial;
    if (to_stdout) {
        fd = UniqueFd(::dup(STDOUT_FILENO));
    } else {
        partial = destination + ".sbx-partial-XXXXXX";
        fd = UniqueFd(::mkstemp(partial.data()));
        if (!fd.valid()) {
            return ctx.out.fail(local_failure(sys_error("creating {}", partial)));
        }
        mode_t mask = ::umask(0);
        ::umask(mask);
        ::fchmod(fd.get(), 0666 & ~mask);
    }
    auto remove_partial = [&] {
        if (!partial.empty()) {
            ::unlink(partial.c_str());
        }
    };
    std::uint64_t total = std::strtoull(stream->header("Content-Length").c_str(), nullptr, 10);
    std::uint64_t received = 0;
    {
        Progress progress(!ctx.out.json() && !to_stdout, total);
        std::array<char, 256 * 1024> chunk;
        for (;;) {
            auto got = stream->read(chunk);
            if (!got) {
                remove_partial();
                return ctx.out.fail(failure_of(got.error()));
            }
            if (*got == 0) {
                break;
            }
            if (auto written = write_all(fd.get(), chunk.data(), *got); !written) {
                remove_partial();
                return ctx.out.fail(local_failure(written.error().context(destination)));
            }
            received += *got;
            progress.update(received);
        }
    }
    if (!to_stdout && (::fsync(fd.get()) != 0 || ::rename(partial.c_str(), destination.c_str()) != 0)) {
        Error error = sys_error("saving {}", destination);
        remove_partial();
        return ctx.out.fail(local_failure(error));
    }
    if (!to_stdout) {
        print_copied(ctx, remote.sandbox + ":" + remote.path, destination, received);
    }
    return kExitOk;
}

}  // namespace

int run_scp(const Context& ctx, const std::string& from, const std::string& to, bool recursive) {
    auto source = parse_copy_end(from);
    auto dest = parse_copy_end(to);
    if (!source || !dest) {
        return ctx.out.fail(source ? dest.error() : source.error());
    }
    if (source->sandbox.empty() == dest->sandbox.empty()) {
        return ctx.out.fail(
            make_coded_error("usage", "scp: one side is ID:/path in a sandbox, the other a local path"));
    }
    if (source->sandbox.empty()) {
        struct stat st {};
        // A symlink named as the source is followed, as scp(1) does.
        if (recursive && ::stat(source->path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
            return upload_tree(ctx, source->path, *dest);
        }
        return upload(ctx, source->path, *dest);
    }
    if (recursive && remote_is_dir(ctx, *source)) {
        return download_tree(ctx, *source, dest->path);
    }
    return download(ctx, *source, dest->path);
}

}  // namespace sbx::cli
